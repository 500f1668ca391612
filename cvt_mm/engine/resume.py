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
import json
import os
import os.path as osp
import re
import time
from typing import List, Optional, Tuple

import torch.distributed as torch_dist
from mmengine.config import ConfigDict

from ..checkpoint.io import CheckpointError, reading_once
from ..checkpoint.loading import read_checkpoint
from .flags import flag_group

__all__ = ['find_resumable_checkpoint', 'restart_count', 'checkpoint_progress',
           'describe_restart', 'choose_resume', 'HEARTBEAT_FILE', 'read_heartbeat']

#: Where :class:`~cvt_mm.engine.hooks.HeartbeatHook` records progress, in the work dir.
HEARTBEAT_FILE = 'heartbeat.json'


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
    and the work lost since (from the :class:`~cvt_mm.engine.hooks.HeartbeatHook`
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


def read_heartbeat(work_dir: str) -> Optional[dict]:
    """The last :class:`HeartbeatHook` record of ``work_dir``, or None."""
    path = osp.join(work_dir, HEARTBEAT_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _say(message: str) -> None:
    """Print once per job (rank 0), before MMEngine's logger exists."""
    if os.environ.get('RANK', '0') == '0':
        print(message, flush=True)


def _choose_checkpoint(cfg, resume, restarted: bool) -> tuple:
    """(path or None, the checkpoint's seed or None), and the log lines; see
    :func:`choose_resume`."""
    # The candidates, the chosen file's seed and the restart message read each file once.
    with reading_once():
        path = None
        if resume == 'auto' or restarted:
            path, skipped = find_resumable_checkpoint(cfg.work_dir)
            for line in skipped:
                _say(f'--resume: {line}')
            if restarted:
                _say(describe_restart(cfg.work_dir, path))
            if path is None and resume not in (None, 'auto'):
                path = resume  # restarted before the first checkpoint: the file asked for
        elif resume is not None:
            path = resume
        if path is None:
            if resume == 'auto':
                _say(f'--resume: no checkpoint to resume from in {cfg.work_dir}; training '
                     'starts at the beginning')
            return None, None
        checkpoint = read_checkpoint(path)  # a clear error for a missing or damaged file
        if not restarted:
            _say(f'--resume: resuming from {path}')
        return path, checkpoint.get('meta', {}).get('seed')


def choose_resume(cfg, resume) -> None:
    """Decide what the run continues from, in place (``cfg.resume``, ``cfg.load_from``,
    ``cfg.randomness.seed``), and say it.

    * ``resume='auto'`` (``--resume`` without a file): the newest complete checkpoint of the
      work dir (:func:`~cvt_mm.engine.resume.find_resumable_checkpoint`), or the start.
    * a path: that checkpoint (a clear error when it cannot be read).
    * after a torchrun restart or a slurm requeue (:func:`~cvt_mm.engine.resume.restart_count`
      > 0): the newest complete checkpoint of the work dir whatever was passed, since the
      failed attempt may have written newer ones; the log line says which, and how much work
      the failure cost (:func:`~cvt_mm.engine.resume.describe_restart`).

    When resuming, a config without a fixed seed takes the checkpoint's, so the data order
    and the per-sample augmentation seeds continue as before.

    When the process group is up (``tools/train.py`` starts it before this, for torchrun and
    slurm: :func:`prepare_distributed`), rank 0 alone chooses and every rank takes its choice,
    or its error: ranks looking on their own could see different files (a save landing in
    between) and resume from different iterations. Without a process group (a Runner built
    by other code) each rank chooses for itself.

    Args:
        cfg (Config): the run's config.
        resume (str | None): ``'auto'``, a checkpoint path, or None (no ``--resume``).
    """
    restarted = restart_count() > 0
    shared = torch_dist.is_available() and torch_dist.is_initialized() and \
        torch_dist.get_world_size() > 1
    choice = [None, None, None]  # path, seed, error
    if not shared or torch_dist.get_rank() == 0:
        try:
            choice[:2] = _choose_checkpoint(cfg, resume, restarted)
        except Exception as err:  # noqa: BLE001 - every rank raises it, below
            if not shared:
                raise
            choice[2] = err
    if shared:
        torch_dist.broadcast_object_list(choice, src=0, group=flag_group())
    path, seed, error = choice
    if error is not None:
        raise error
    if path is None:
        if resume == 'auto':
            cfg.load_from = None
        cfg.resume = False
        return
    cfg.resume = True
    cfg.load_from = path
    randomness = cfg.get('randomness') or ConfigDict()
    if randomness.get('seed') is None and seed is not None:
        randomness['seed'] = seed
        cfg.randomness = randomness
