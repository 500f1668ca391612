"""MMEngine's training loops, resumable part-way through an epoch without reading the data
already trained on.

MMEngine's ``EpochBasedTrainLoop`` resumed from a checkpoint written mid-epoch trains that
epoch again from its first batch, and its ``IterBasedTrainLoop`` replays every batch already
trained on through the data loader (decoding and augmenting each image) to reach the resumed
position. These subclasses start the data stream at the resumed batch instead
(:meth:`cvt_mm.engine.sampling.ResumableBatchSampler.start_at`: only indices are drawn for the
skipped batches), and wrap the train dataloader so that each sample's augmentation depends on
its place in the run, not on the worker that loads it (:mod:`cvt_mm.engine.sampling`). Together
with :class:`cvt_mm.engine.hooks.ExactResumeHook` a resumed run trains on the same batches,
with the same augmentations and the same random draws, as the uninterrupted run.

``tools/train.py`` swaps MMEngine's two loops for these (:func:`cvt_mm.engine.runner_setup.
prepare_training`). Example (a config used with another launcher)::

    train_cfg = dict(type='ResumableEpochBasedTrainLoop', max_epochs=12, val_interval=1)
    custom_hooks = [dict(type='ExactResumeHook')]
"""
from __future__ import annotations

from typing import Dict, Optional, Union

from mmengine.logging import print_log
from mmengine.registry import LOOPS
from mmengine.runner.loops import (
    EpochBasedTrainLoop,
    IterBasedTrainLoop,
    _InfiniteDataloaderIterator,
)
from torch.utils.data import DataLoader

from .sampling import ResumableBatchSampler, resumable_dataloader_cfg

__all__ = ['ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop']


def _build_dataloader(runner, dataloader: Union[DataLoader, Dict]) -> DataLoader:
    if not isinstance(dataloader, dict):
        return dataloader
    diff_rank_seed = runner._randomness_cfg.get('diff_rank_seed', False)
    return runner.build_dataloader(resumable_dataloader_cfg(dataloader, runner.seed),
                                   seed=runner.seed, diff_rank_seed=diff_rank_seed)


def _resumable_sampler(dataloader: DataLoader) -> Optional[ResumableBatchSampler]:
    sampler = getattr(dataloader, 'batch_sampler', None)
    return sampler if isinstance(sampler, ResumableBatchSampler) else None


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(EpochBasedTrainLoop):
    """``EpochBasedTrainLoop`` that resumes mid-epoch at the next batch.

    Arguments as MMEngine's ``EpochBasedTrainLoop``. :attr:`resume_batch` (set by
    :class:`~cvt_mm.engine.hooks.ExactResumeHook` from the checkpoint; by default
    derived from the resumed iteration) is the number of batches of the current epoch
    already trained on.
    """

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_epochs: int,
                 val_begin: int = 1, val_interval: int = 1, dynamic_intervals=None) -> None:
        super().__init__(runner, _build_dataloader(runner, dataloader), max_epochs,
                         val_begin=val_begin, val_interval=val_interval,
                         dynamic_intervals=dynamic_intervals)
        self.resume_batch: Optional[int] = None
        self._first_epoch = True

    def run_epoch(self) -> None:
        length = len(self.dataloader)
        start, self.resume_batch = self.resume_batch, None
        if start is None:  # not set by ExactResumeHook: MMEngine's counters tell
            start = self._iter - self._epoch * length if self._first_epoch else 0
        self._first_epoch = False
        start = min(max(start, 0), length)
        self.runner.call_hook('before_train_epoch')
        self.runner.model.train()
        if start:
            print_log(f'Resuming epoch {self._epoch + 1} at batch {start + 1}/{length}: the '
                      f'{start} batches before it were trained on before the checkpoint and '
                      'are skipped without being loaded', logger='current')
        if start < length:
            sampler = _resumable_sampler(self.dataloader)
            if start and sampler is None:
                raise RuntimeError(
                    'resuming mid-epoch needs the ResumableBatchSampler that this loop puts '
                    'in the train dataloader; this loop was given a built DataLoader without '
                    'it. Pass the dataloader as a config dict.')
            if sampler is not None:
                sampler.start_at(start)
            for idx, data_batch in enumerate(self.dataloader, start=start):
                self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1


@LOOPS.register_module()
class ResumableIterBasedTrainLoop(IterBasedTrainLoop):
    """``IterBasedTrainLoop`` that resumes by drawing and discarding the indices of the
    batches already trained on, instead of loading them.

    Arguments as MMEngine's ``IterBasedTrainLoop``. The data iterator is created when
    training starts (MMEngine creates it with the loop, before a resume is known).
    """

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_iters: int,
                 val_begin: int = 1, val_interval: int = 1000, dynamic_intervals=None) -> None:
        dataloader = _build_dataloader(runner, dataloader)
        sampler = _resumable_sampler(dataloader)
        if sampler is not None:
            sampler.hold()  # MMEngine's __init__ iterates once; nothing is prefetched
        super().__init__(runner, dataloader, max_iters, val_begin=val_begin,
                         val_interval=val_interval, dynamic_intervals=dynamic_intervals)
        self.resume_batch: Optional[int] = None

    def run(self):
        self.runner.call_hook('before_train')
        self.runner.call_hook('before_train_epoch')
        start = self._iter if self.resume_batch is None else self.resume_batch
        self.resume_batch = None
        sampler = _resumable_sampler(self.dataloader)
        if sampler is not None:
            if start:
                print_log(f'Resuming at iteration {self._iter + 1}: the indices of the {start} '
                          'batches trained on before the checkpoint are drawn and discarded; '
                          'no image of them is loaded', logger='current')
            sampler.start_at(start)
            self.dataloader_iterator = _InfiniteDataloaderIterator(self.dataloader)
        elif self._iter:
            print_log(f'Advancing the dataloader {self._iter} batches (loading them) to skip '
                      'data already trained on', logger='current')
            for _ in range(self._iter):
                next(self.dataloader_iterator)
        while self._iter < self._max_iters and not self.stop_training:
            self.runner.model.train()
            data_batch = next(self.dataloader_iterator)
            self.run_iter(data_batch)
            self._decide_current_val_interval()
            if (self.runner.val_loop is not None and self._iter >= self.val_begin
                    and (self._iter % self.val_interval == 0 or self._iter == self._max_iters)):
                self.runner.val_loop.run()
        self.runner.call_hook('after_train_epoch')
        self.runner.call_hook('after_train')
        return self.runner.model
