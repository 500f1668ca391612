"""MMEngine's training loops, resumable part-way through an epoch without reading the data
already trained on.

MMEngine's ``EpochBasedTrainLoop`` resumed from a checkpoint written mid-epoch trains that
epoch again from its first batch, and its ``IterBasedTrainLoop`` replays every batch already
trained on through the data loader (decoding and augmenting each image) to reach the resumed
position. These subclasses train on torchdata's ``StatefulDataLoader`` and start it where the
checkpoint left it (:mod:`cvt_mm.engine.sampling`: only indices are drawn for the batches
before it). With :class:`cvt_mm.engine.hooks.ExactResumeHook`, which saves and restores the
loader's state with every rank's generators, a resumed run trains on the same batches, with the
same augmentations and the same random draws, as the uninterrupted run.

:class:`~cvt_mm.engine.runner.ExactResumeRunner` swaps MMEngine's two loops for these. Example
(a config used with another runner)::

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

from .sampling import is_stateful, start_loader_at, stateful_train_dataloader

__all__ = ['ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop']


class _ResumableLoop:
    """What both loops share: the train dataloader made stateful, and where to resume.

    :attr:`resume_batch` (batches of the current epoch, or of the stream, already trained on)
    and :attr:`resume_data` (a :func:`~cvt_mm.engine.sampling.data_state`, when one fits this
    run) are set by :class:`~cvt_mm.engine.hooks.ExactResumeHook` from the checkpoint; without
    them the loop derives the batch from MMEngine's counters.
    """
    resume_batch: Optional[int] = None
    resume_data: Optional[dict] = None

    @staticmethod
    def _stateful(runner, dataloader: Union[DataLoader, Dict]) -> DataLoader:
        return stateful_train_dataloader(runner, dataloader) if isinstance(dataloader, dict) \
            else dataloader

    def _start_data_at(self, batch: int) -> bool:
        """Position the loader (False: not ours, and at its start)."""
        state, self.resume_data = self.resume_data, None
        if not is_stateful(self.dataloader):
            if batch:
                raise RuntimeError(
                    'resuming mid-epoch needs the StatefulDataLoader that this loop builds '
                    'from the train dataloader config; it was given a built DataLoader. Pass '
                    'the dataloader as a config dict.')
            return False
        start_loader_at(self.dataloader, batch, state)
        return True


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(_ResumableLoop, EpochBasedTrainLoop):
    """``EpochBasedTrainLoop`` that resumes mid-epoch at the next batch.

    Arguments as MMEngine's ``EpochBasedTrainLoop``.
    """

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_epochs: int,
                 val_begin: int = 1, val_interval: int = 1, dynamic_intervals=None) -> None:
        super().__init__(runner, self._stateful(runner, dataloader), max_epochs,
                         val_begin=val_begin, val_interval=val_interval,
                         dynamic_intervals=dynamic_intervals)
        self._first_epoch = True

    def run_epoch(self) -> None:
        length = len(self.dataloader)
        start, self.resume_batch = self.resume_batch, None
        if start is None:  # not set by ExactResumeHook: MMEngine's counters tell
            start = self._iter - self._epoch * length if self._first_epoch else 0
        start = min(max(start, 0), length)
        self.runner.call_hook('before_train_epoch')  # sets the sampler's epoch
        if self._first_epoch:
            self._start_data_at(start)
        self._first_epoch = False
        self.runner.model.train()
        if start:
            print_log(f'Resuming epoch {self._epoch + 1} at batch {start + 1}/{length}: the '
                      f'{start} batches before it were trained on before the checkpoint and '
                      'are skipped without being loaded', logger='current')
        for idx, data_batch in enumerate(self.dataloader, start=start):
            self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1


@LOOPS.register_module()
class ResumableIterBasedTrainLoop(_ResumableLoop, IterBasedTrainLoop):
    """``IterBasedTrainLoop`` that resumes by drawing and discarding the indices of the
    batches already trained on, instead of loading them.

    Arguments as MMEngine's ``IterBasedTrainLoop``.
    """

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_iters: int,
                 val_begin: int = 1, val_interval: int = 1000, dynamic_intervals=None) -> None:
        dataloader = self._stateful(runner, dataloader)
        if is_stateful(dataloader):
            # MMEngine's __init__ makes a data iterator; it must draw nothing yet.
            dataloader.batch_sampler.hold()
        super().__init__(runner, dataloader, max_iters, val_begin=val_begin,
                         val_interval=val_interval, dynamic_intervals=dynamic_intervals)

    def run(self):
        self.runner.call_hook('before_train')
        self.runner.call_hook('before_train_epoch')
        start = self._iter if self.resume_batch is None else self.resume_batch
        self.resume_batch = None
        if start:
            print_log(f'Resuming at iteration {self._iter + 1}: the indices of the {start} '
                      'batches trained on before the checkpoint are drawn and discarded; no '
                      'image of them is loaded', logger='current')
        if self._start_data_at(start):
            self.dataloader_iterator = _InfiniteDataloaderIterator(self.dataloader)
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
