"""Which checkpoint a run continues from: ``tools/train.py --resume``, and the automatic
resume after a torchrun restart or a slurm requeue.

MMEngine resumes from the file named in ``WORK_DIR/last_checkpoint``: when that file is
missing it logs ``Auto resumed from the latest checkpoint None.`` and starts at iteration 1;
when the checkpoint is truncated (a run killed while saving) the resume crashes. Here the
candidates are tried newest first and the first one that reads completely is taken; each
skipped file is reported with the reason.

Example::

    path, skipped = find_resumable_checkpoint('work_dirs/mask_rcnn_cvt13_coco')
    if restart_count():  # this process was started again after a failure
        print(describe_restart('work_dirs/mask_rcnn_cvt13_coco', path))
"""
from __future__ import annotations

import glob
import os
import os.path as osp
import re
import time
from typing import List, Optional, Tuple

from ..checkpoint.io import CheckpointError
from ..checkpoint.loading import read_checkpoint
from .preemption import read_heartbeat

__all__ = ['find_resumable_checkpoint', 'restart_count', 'checkpoint_progress',
           'describe_restart']


def _number(path: str) -> int:
    """Iteration or epoch number in an MMEngine checkpoint name (iter_8.pth, epoch_3.pth)."""
    match = re.search(r'(\d+)\.pth$', osp.basename(path))
    return int(match.group(1)) if match else -1


def _read_training_checkpoint(path: str) -> Tuple[Optional[dict], Optional[str]]:
    """(checkpoint, None) when ``path`` is a complete training checkpoint, else (None, why)."""
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError as err:
        return None, str(err)
    missing = [k for k in ('state_dict', 'optimizer', 'meta') if k not in ckpt]
    if missing:
        return None, f'not a training checkpoint (no {", ".join(missing)})'
    return ckpt, None


def find_resumable_checkpoint(work_dir: str) -> Tuple[Optional[str], List[str]]:
    """The newest checkpoint in ``work_dir`` that reads completely and holds what resuming
    needs (weights, optimizer, progress), and one line per newer file skipped.

    Candidates: the file ``last_checkpoint`` names, then every ``*.pth`` in ``work_dir``,
    most recently written first (names do not order a run that mixes ``epoch_N.pth`` with the
    ``iter_N.pth`` of a preemption), the higher number first among files written at once.

    Returns:
        tuple: (path or None, [reasons for the files skipped]).
    """
    candidates = sorted(glob.glob(osp.join(work_dir, '*.pth')),
                        key=lambda p: (os.stat(p).st_mtime_ns, _number(p)), reverse=True)
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named:
            candidates = [named] + [c for c in candidates
                                    if osp.abspath(c) != osp.abspath(named)]
    skipped = []
    for path in candidates:
        ckpt, why = _read_training_checkpoint(path)
        if ckpt is None:
            skipped.append(f'skipped {path}: {why}')
            continue
        return path, skipped
    return None, skipped


def _count(name: str) -> int:
    value = os.environ.get(name, '')
    return int(value) if value.isdigit() else 0


def restart_count() -> int:
    """How many times this job was started again after a failure: slurm's
    ``SLURM_RESTART_COUNT`` (a requeued job) plus torchrun's ``TORCHELASTIC_RESTART_COUNT``
    (``--max-restarts``); 0 for a first start.

    Both count: torchrun started inside a requeued slurm job sets its own counter to 0, and
    that must not hide the requeue (the run would start over and move ``last_checkpoint``
    back).
    """
    return _count('SLURM_RESTART_COUNT') + _count('TORCHELASTIC_RESTART_COUNT')


def checkpoint_progress(path: str) -> Tuple[int, int]:
    """(iteration, epoch) recorded in a training checkpoint's ``meta``."""
    meta = read_checkpoint(path).get('meta', {})
    return int(meta.get('iter', 0)), int(meta.get('epoch', 0))


def describe_restart(work_dir: str, checkpoint: Optional[str]) -> str:
    """One line for the log of a restarted run: the attempt, the checkpoint it resumes from
    and the work lost since (from the :class:`~cvt_mm.engine.preemption.HeartbeatHook`
    record of the failed attempt)."""
    sources = []
    requeues, restarts = _count('SLURM_RESTART_COUNT'), _count('TORCHELASTIC_RESTART_COUNT')
    if requeues:
        sources.append(f'slurm requeue {requeues}, after a preemption, a time limit or a '
                       'failure')
    if restarts:
        limit = os.environ.get('TORCHELASTIC_MAX_RESTARTS')
        sources.append(f'torchrun restart {restarts} of {limit}, after a process of the job '
                       'failed')
    source = ' and '.join(sources) or 'a first start'
    beat = read_heartbeat(work_dir)
    if checkpoint is None:
        resumed_iter = 0
        what = f'no complete checkpoint in {work_dir}: training starts again at iteration 1'
    else:
        resumed_iter, epoch = checkpoint_progress(checkpoint)
        what = f'resuming from {checkpoint} (iteration {resumed_iter}, epoch {epoch})'
    if beat is None:
        lost = 'the failed attempt left no heartbeat, so the work lost is unknown'
    else:
        when = time.strftime('%H:%M:%S', time.localtime(float(beat['time'])))
        slack = f'{beat.get("interval", 10):.0f} s'
        iters = int(beat['iter']) - resumed_iter
        if iters > 0:
            pace = beat.get('seconds_per_iter')
            cost = f' (about {iters * pace / 60:.1f} min)' if pace else ''
            lost = (f'the failed attempt had reached iteration {beat["iter"]} at {when}: '
                    f'{iters} iterations{cost} are lost, and up to {slack} after that record')
        else:
            lost = (f'the failed attempt had not passed this checkpoint at its last record '
                    f'({when}): at most {slack} of training are lost')
    return f'{source}: {what}; {lost}.'
