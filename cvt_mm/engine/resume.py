"""Which checkpoint ``tools/train.py --resume`` continues from.

MMEngine resumes from the file named in ``WORK_DIR/last_checkpoint``: when that file is
missing it logs ``Auto resumed from the latest checkpoint None.`` and starts at iteration 1;
when the checkpoint is truncated (a run killed while saving) the resume crashes. Here the
candidates are tried newest first and the first one that reads completely is taken; each
skipped file is reported with the reason.
"""
from __future__ import annotations

import glob
import os.path as osp
import re
from typing import List, Optional, Tuple

from ..weights import CheckpointError, read_checkpoint

__all__ = ['find_resumable_checkpoint']


def _progress(path: str) -> int:
    """Iteration or epoch number in an MMEngine checkpoint name (iter_8.pth, epoch_3.pth)."""
    match = re.search(r'(\d+)\.pth$', osp.basename(path))
    return int(match.group(1)) if match else -1


def find_resumable_checkpoint(work_dir: str) -> Tuple[Optional[str], List[str]]:
    """The newest checkpoint in ``work_dir`` that reads completely and holds what resuming
    needs (weights, optimizer, progress), and one line per newer file skipped.

    Candidates: the file ``last_checkpoint`` names, then every ``*.pth`` in ``work_dir``,
    newest (highest iteration/epoch, then latest modification) first.

    Returns:
        tuple: (path or None, [reasons for the files skipped]).
    """
    candidates = sorted(glob.glob(osp.join(work_dir, '*.pth')),
                        key=lambda p: (_progress(p), osp.getmtime(p)), reverse=True)
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = f.read().strip()
        if named:
            candidates = [named] + [c for c in candidates
                                    if osp.abspath(c) != osp.abspath(named)]
    skipped = []
    for path in candidates:
        try:
            ckpt = read_checkpoint(path)
        except CheckpointError as err:
            skipped.append(f'skipped {path}: {err}')
            continue
        missing = [k for k in ('state_dict', 'optimizer', 'meta') if k not in ckpt]
        if missing:
            skipped.append(f'skipped {path}: not a training checkpoint (no '
                           f'{", ".join(missing)})')
            continue
        return path, skipped
    return None, skipped
