"""Hooks that ``tools/train.py`` adds to every training run (configs may list them too).

* :class:`FiniteLossHook`: stop at the first non-finite loss, before its backward pass and
  optimizer step, naming the iteration and the batch's image files.
* :class:`RandomStateHook`: save the random states of Python, NumPy and torch in every
  checkpoint and restore them on resume, so a resumed run continues exactly as the
  uninterrupted one would have.

Example (a config that runs with another launcher than ``tools/train.py``)::

    custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
    custom_hooks = [dict(type='FiniteLossHook'), dict(type='RandomStateHook')]
"""
from __future__ import annotations

import random
from typing import Optional

import numpy as np
import torch
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['FiniteLossHook', 'RandomStateHook', 'capture_random_states',
           'restore_random_states']


def _image_files(data_batch) -> list:
    samples = data_batch.get('data_samples', []) if isinstance(data_batch, dict) else []
    files = []
    for sample in samples or []:
        meta = getattr(sample, 'metainfo', None) or {}
        path = meta.get('img_path') or meta.get('filename')
        if path:
            files.append(path)
    return files


@HOOKS.register_module()
class FiniteLossHook(Hook):
    """Stop training at the first non-finite loss before it reaches the weights.

    A NaN or infinite loss (a corrupt image decoded into NaNs, an overflow) makes every
    gradient and then every weight NaN, and a checkpoint saved afterwards is useless. This
    hook checks the loss where the optimizer wrapper receives it, before ``backward`` and the
    optimizer step, on every rank together (one all-reduce of a flag under DDP), and raises
    ``FloatingPointError`` naming the iteration, the loss terms that are not finite and the
    batch's image files. No checkpoint is written for that iteration, so the newest
    checkpoint is the last good one. MMDetection's ``CheckInvalidLossHook`` checks after the
    step, when the weights are already NaN.

    Args:
        None.
    """
    priority = 'VERY_HIGH'

    def __init__(self):
        self._files: list = []
        self._iteration = 0

    def before_train(self, runner) -> None:
        wrapper = runner.optim_wrapper
        if getattr(wrapper, '_cvt_mm_finite_guard', False):
            return
        update_params = wrapper.update_params
        hook = self

        def checked_update_params(loss, *args, **kwargs):
            hook._check(loss, runner)
            return update_params(loss, *args, **kwargs)

        wrapper.update_params = checked_update_params
        wrapper._cvt_mm_finite_guard = True

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._files = _image_files(data_batch)
        self._iteration = runner.iter + 1

    def _check(self, loss: torch.Tensor, runner) -> None:
        bad = (~torch.isfinite(loss.detach())).any().float()
        if get_world_size() > 1:
            all_reduce(bad)  # every rank stops together, none waits in a collective
        if bad.item() == 0:
            return
        if torch.isfinite(loss.detach()).all():
            raise FloatingPointError(
                f'another process had a non-finite loss at iteration {self._iteration}; '
                'stopping with it (its message names the images)')
        raise FloatingPointError(
            f'non-finite loss ({loss.item()}) at iteration {self._iteration}: training stopped '
            'before the backward pass and the optimizer step, so the newest checkpoint in '
            f'{runner.work_dir} is the last good one. Images of this batch: '
            f'{", ".join(self._files) or "(the batch names no files)"}. Check these files (a '
            'corrupt or NaN-producing decode), the learning rate and the loss weights.')


def capture_random_states() -> dict:
    """Python, NumPy, torch CPU (and CUDA, when initialised) random states, in types that
    safe checkpoint loading accepts (ints, lists, tensors)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    states = dict(python=random.getstate(),
                  numpy=(np_kind, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos),
                         int(np_has_gauss), float(np_gauss)),
                  torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state_all()
    return states


def restore_random_states(states: dict) -> None:
    version, internal, gauss = states['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states['numpy']
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states['torch'])
    if states.get('cuda') is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states['cuda'])


class _RestoreAfterReplay:
    """Iterator proxy: after the loop has replayed ``count`` batches (MMEngine's iteration-
    based resume skips the batches already trained on), restore the random states, before
    the first new batch is fetched."""

    def __init__(self, iterator, count: int, states: dict):
        self._iterator, self._left, self._states = iterator, count, states

    def __next__(self):
        item = next(self._iterator)
        if self._left:
            self._left -= 1
            if self._left == 0:
                restore_random_states(self._states)
        return item

    def __iter__(self):
        return self

    def __getattr__(self, name):
        return getattr(self._iterator, name)


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Make a resumed run continue exactly as the uninterrupted run.

    MMEngine resumes weights, optimizer, schedulers and the iteration, but re-seeds the
    random generators, so drop path, random sampling of RoIs and augmentations differ after a
    resume. This hook stores the states in every checkpoint (``random_states``) and restores
    them where the uninterrupted run was: at the start of the next epoch, or, for
    iteration-based loops, right after MMEngine has replayed the batches already trained on.
    Validation inside training saves and restores the states around itself, so it never
    shifts the training's random streams.

    Exact on one process when data loading happens in the main process (``num_workers=0``),
    in workers that are re-created every epoch (``persistent_workers=False``), or in
    iteration-based loops (their replay advances the workers too). Persistent workers of
    epoch-based loops restart their own random streams at a resume, and under DDP only rank
    0's states are saved (checkpoints are written by rank 0); those runs resume as MMEngine
    alone does.
    """
    priority = 'VERY_HIGH'

    def __init__(self):
        self._pending: Optional[dict] = None
        self._around_val: Optional[dict] = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['random_states'] = capture_random_states()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._pending = checkpoint.get('random_states')

    def before_train_epoch(self, runner) -> None:
        states, self._pending = self._pending, None
        if states is None or runner.iter == 0:  # load_from (fine-tuning), not a resume
            return
        loop = runner.train_loop
        replayed = getattr(loop, '_iter', 0) if hasattr(loop, 'dataloader_iterator') else 0
        if replayed:
            loop.dataloader_iterator = _RestoreAfterReplay(loop.dataloader_iterator,
                                                           replayed, states)
        else:
            restore_random_states(states)

    def before_val(self, runner) -> None:
        self._around_val = capture_random_states()

    def after_val(self, runner) -> None:
        if self._around_val is not None:
            restore_random_states(self._around_val)
            self._around_val = None
