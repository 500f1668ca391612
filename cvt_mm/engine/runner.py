"""The runner of cvt_mm's training configs and its loops: MMEngine's ``Runner`` that, when it
trains, makes its loop resumable mid-epoch and adds the training hooks
(:func:`add_training_guards`).

Our configs name it and list the guards themselves (``configs/_base_/training_guards.py``,
which the schedule bases, the ImageNet recipe and each config built on a whole toolbox config
inherit), so a printed config shows what runs; the runner adds the guards a config leaves out
(a user's ``custom_hooks`` replaces the base's list) and logs which. They come with the config
under any launcher that builds the runner by ``runner_type``: ``tools/train.py``, MMDetection's
and MMSegmentation's ``tools/train.py``, ``mim train``. A config naming another
``runner_type`` gets that runner as it is.

The loops: MMEngine's ``EpochBasedTrainLoop`` resumed from a checkpoint written mid-epoch
trains that epoch again from its first batch, and its ``IterBasedTrainLoop`` replays every
batch already trained on through the data loader (decoding and augmenting each image). Their
subclasses here train on torchdata's ``StatefulDataLoader`` and start it where the checkpoint
left it (:mod:`cvt_mm.engine.exact_resume`, whose hook saves and restores the position).

Example (a config of one's own, on a toolbox's)::

    _base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
    custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
    runner_type = 'ExactResumeRunner'
"""
from __future__ import annotations

from typing import Dict, Optional, Union

from mmengine.logging import print_log
from mmengine.registry import LOOPS, RUNNERS
from mmengine.runner import Runner
from mmengine.runner.loops import (
    EpochBasedTrainLoop,
    IterBasedTrainLoop,
    _InfiniteDataloaderIterator,
)
from torch.utils.data import DataLoader

from .exact_resume import is_stateful, start_loader_at, stateful_train_dataloader
from .workers import guard_dataloader_workers

__all__ = ['ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop', 'RESUMABLE_LOOPS',
           'TRAINING_HOOKS', 'add_training_guards', 'ExactResumeRunner']


# ------------------------------------------------------------------------------------ loops
class _ResumableLoop:
    """What both loops share: the train dataloader made stateful, and where to resume.

    :attr:`resume_batch` (batches of the current epoch, or of the stream, already trained on)
    and :attr:`resume_data` (a :func:`~.exact_resume.data_state`, when one fits this
    run) are set by :class:`~.exact_resume.ExactResumeHook` from the checkpoint; without
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


# ----------------------------------------------------------------------------------- runner
# MMEngine's loops and the subclasses that resume them exactly (above).
RESUMABLE_LOOPS = {'EpochBasedTrainLoop': 'ResumableEpochBasedTrainLoop',
                   'IterBasedTrainLoop': 'ResumableIterBasedTrainLoop'}

# Hooks every training run gets (configs/_base_/training_guards.py lists them; a config that
# lists one keeps its own settings).
TRAINING_HOOKS = ('FiniteLossHook', 'ExactResumeHook', 'PreemptionHook', 'HeartbeatHook')


def _resumable_loop(loop: dict) -> dict:
    loop = dict(loop)
    loop_type = loop.get('type')
    by_epoch = loop.pop('by_epoch', None)
    if loop_type is None:  # MMEngine's short form: dict(by_epoch=..., max_...)
        loop_type = 'EpochBasedTrainLoop' if by_epoch else 'IterBasedTrainLoop'
    elif by_epoch is not None and loop_type in (*RESUMABLE_LOOPS, *RESUMABLE_LOOPS.values()):
        # The short form (MMPretrain's habit) merged onto a config that names the loop
        # (ours): MMEngine refuses both keys; a by_epoch that matches the loop is dropped.
        if bool(by_epoch) != ('Epoch' in loop_type):
            other = 'IterBasedTrainLoop' if by_epoch is False else 'EpochBasedTrainLoop'
            raise ValueError(
                f'train_cfg: by_epoch={by_epoch} contradicts type={loop_type!r}, which the '
                f"config's base names; write train_cfg=dict(_delete_=True, "
                f"type='Resumable{other}', ...)")
    if loop_type in RESUMABLE_LOOPS:
        loop_type = RESUMABLE_LOOPS[loop_type]
    elif loop_type not in RESUMABLE_LOOPS.values():
        print_log(f'train_cfg type {loop_type!r} is not one of MMEngine\'s two loops: it is '
                  'kept, and a resume continues at epoch boundaries only', logger='current',
                  level=30)
    loop['type'] = loop_type
    return loop


def add_training_guards(runner: Runner) -> None:
    """What every training run gets, added to a runner before its ``train()`` builds the loops
    (in place; a second call adds nothing):

    * MMEngine's epoch- and iteration-based loops become their resumable subclasses
      (:mod:`cvt_mm.engine.runner`: exact mid-epoch resume on a ``StatefulDataLoader``, data
      workers that die with their process); other loops are kept, with a warning;
    * the hooks :data:`TRAINING_HOOKS` that the config does not list: stop at a non-finite
      loss, save and restore every rank's random states and data position, checkpoint and
      exit on SIGTERM/SIGUSR1, record progress;
    * validation and test data workers die with their process too.

    Args:
        runner (Runner): a runner that has not trained yet.
    """
    if isinstance(runner._train_loop, dict):
        runner._train_loop = _resumable_loop(runner._train_loop)
    present = {type(hook).__name__ for hook in runner.hooks}
    added = [name for name in TRAINING_HOOKS if name not in present]
    for name in added:
        runner.register_hook(dict(type=name))
    if added:
        runner.logger.info(f'Training guards added (not in the config\'s custom_hooks): '
                           f'{", ".join(added)}')
    for loader in (runner._val_dataloader, runner._test_dataloader):
        if isinstance(loader, dict):
            guard_dataloader_workers(loader)


@RUNNERS.register_module()
class ExactResumeRunner(Runner):
    """MMEngine's ``Runner`` whose ``train()`` first adds :func:`add_training_guards`; testing
    and validation alone run as MMEngine's. Arguments as ``Runner``."""

    def train(self):
        add_training_guards(self)
        return super().train()
