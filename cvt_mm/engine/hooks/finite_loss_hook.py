"""Stopping training at the first non-finite loss, before it reaches the weights
(:class:`FiniteLossHook`; configs/_base_/training_guards.py lists it)."""
from __future__ import annotations

import torch
import torch.distributed as torch_dist
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ..flags import flag_group

__all__ = ['FiniteLossHook']


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

    The loss is checked where the optimizer wrapper receives it, before ``backward`` and the
    step, on every rank together (an all-reduce of a flag on
    :func:`~cvt_mm.engine.flags.flag_group`); ``FloatingPointError`` names the iteration and
    the batch's image files, and no checkpoint is written for that iteration.
    MMDetection's ``CheckInvalidLossHook`` checks after the step, when the weights are NaN.
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
        bad = (~torch.isfinite(loss.detach())).any().to('cpu', torch.int32).reshape(1)
        if get_world_size() > 1:
            # Every rank stops together, none waits in a collective.
            torch_dist.all_reduce(bad, op=torch_dist.ReduceOp.MAX, group=flag_group())
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
