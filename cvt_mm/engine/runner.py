"""The runner our training configs name (``runner_type = 'ExactResumeRunner'``) and its loops.
On resume the runner hands the checkpoint's ``resume_state`` to its loop, as MMEngine's
``Runner.resume`` sets the loop's iteration; the loops start the ``StatefulDataLoader`` and
the generators there (MMEngine's epoch-based loop trains a mid-epoch checkpoint's epoch again,
its iteration-based loop loads every batch already trained on).
"""
from __future__ import annotations

import copy
from typing import Dict, Optional, Union

from mmengine.config import Config
from mmengine.dist import get_dist_info
from mmengine.logging import print_log
from mmengine.registry import LOOPS, RUNNERS
from mmengine.runner import Runner
from mmengine.runner.loops import (
    EpochBasedTrainLoop,
    IterBasedTrainLoop,
    _InfiniteDataloaderIterator,
)
from torch.utils.data import DataLoader

from .compile import compile_model, compile_options
from .exact_resume import (
    is_stateful,
    restore_random_states,
    start_loader_at,
    stateful_train_dataloader,
)
from .workers import guard_dataloader_workers

__all__ = ['ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop', 'RESUMABLE_LOOPS',
           'TRAINING_HOOKS', 'add_training_guards', 'ExactResumeRunner', 'RunConfig']


class _ResumableLoop:
    """What both loops share: the train dataloader made stateful, and where to resume."""
    # (batch to start at or None, this rank's data state or None, its generators or None).
    _resume_at: tuple = (None, None, None)

    @staticmethod
    def _stateful(runner, dataloader: Union[DataLoader, Dict]) -> DataLoader:
        return stateful_train_dataloader(runner, dataloader) if isinstance(dataloader, dict) \
            else dataloader

    def resume_from(self, state: Optional[dict]) -> None:
        """Take this rank's part of a checkpoint's ``resume_state`` (None: MMEngine's counters
        tell the batch); another number of processes or workers is said not to be exact."""
        if state is None:
            return
        rank, world_size = get_dist_info()
        saved_ws, batch = state['world_size'], state.get('batch')
        data = state.get('data_states', [None] * saved_ws)[rank] if saved_ws == world_size \
            else None
        if batch is not None and saved_ws != world_size:
            batch = self._rescaled(state, world_size)
        workers = getattr(self.dataloader, 'num_workers', None)
        if data is not None and data['num_workers'] != workers:
            print_log(f'Resuming a checkpoint written with {data["num_workers"]} data workers '
                      f'per process with {workers}: training continues at the same batch, but '
                      "the augmentations differ from the original run's (each worker draws its "
                      f'own random stream). Resume with {data["num_workers"]} workers to '
                      'continue exactly.', logger='current', level=30)
            data = None
        randoms = state['random_states']
        self._resume_at = (batch, data, randoms[rank] if rank < len(randoms) else None)

    def _rescaled(self, state: dict, world_size: int) -> int:
        saved_ws, batch = state['world_size'], state['batch']
        if isinstance(self, IterBasedTrainLoop):
            new = round(batch * saved_ws / world_size)
            where = f'iteration stream at batch {new} per process'
        else:
            length = len(self.dataloader)
            new = min(length, round(batch * length / max(state['epoch_length'], 1)))
            where = f'epoch {state["epoch"] + 1} continues at batch {new + 1}/{length}'
        if get_dist_info()[0] == 0:
            print_log(f'Resuming a checkpoint written by {saved_ws} processes with {world_size}: '
                      'training continues, but not exactly as the original run would have. '
                      f'Each process now sees other batches ({where}, the same share of the '
                      'data), processes that did not exist before start from fresh random '
                      f'states. Resume with {saved_ws} processes to continue exactly.',
                      logger='current', level=30)
        return new

    def _start(self, counted: int) -> int:
        """Restore the generators and position the loader for the run's first batch (after
        ``before_train_epoch``, where the uninterrupted run had these states); returns the
        batch to start at (``counted``, from MMEngine's counters, without a resume state)."""
        batch, data, randoms = self._resume_at
        self._resume_at = (None, None, None)
        start = counted if batch is None else batch
        if randoms is not None:
            restore_random_states(randoms)
        if is_stateful(self.dataloader):
            start_loader_at(self.dataloader, start, data)
        elif start:
            raise RuntimeError(
                'resuming mid-epoch needs the StatefulDataLoader that this loop builds from the '
                'train dataloader config; it was given a built DataLoader. Pass the dataloader '
                'as a config dict.')
        return start


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(_ResumableLoop, EpochBasedTrainLoop):
    """``EpochBasedTrainLoop`` that resumes mid-epoch at the next batch. Arguments as
    MMEngine's ``EpochBasedTrainLoop``."""

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_epochs: int,
                 val_begin: int = 1, val_interval: int = 1, dynamic_intervals=None) -> None:
        super().__init__(runner, self._stateful(runner, dataloader), max_epochs,
                         val_begin=val_begin, val_interval=val_interval,
                         dynamic_intervals=dynamic_intervals)
        self._first_epoch = True

    def run_epoch(self) -> None:
        length, start = len(self.dataloader), 0
        self.runner.call_hook('before_train_epoch')  # sets the sampler's epoch
        if self._first_epoch:
            self._first_epoch = False
            start = min(max(self._start(self._iter - self._epoch * length), 0), length)
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
    """``IterBasedTrainLoop`` that resumes by drawing and discarding the indices of the batches
    already trained on, instead of loading them. Arguments as MMEngine's
    ``IterBasedTrainLoop``."""

    def __init__(self, runner, dataloader: Union[DataLoader, Dict], max_iters: int,
                 val_begin: int = 1, val_interval: int = 1000, dynamic_intervals=None) -> None:
        dataloader = self._stateful(runner, dataloader)
        if is_stateful(dataloader):
            dataloader.batch_sampler.hold()  # MMEngine's __init__ makes an iterator: no draw
        super().__init__(runner, dataloader, max_iters, val_begin=val_begin,
                         val_interval=val_interval, dynamic_intervals=dynamic_intervals)

    def run(self):
        self.runner.call_hook('before_train')
        self.runner.call_hook('before_train_epoch')
        start = self._start(self._iter)
        if start:
            print_log(f'Resuming at iteration {self._iter + 1}: the indices of the {start} '
                      'batches trained on before the checkpoint are drawn and discarded; no '
                      'image of them is loaded', logger='current')
        if is_stateful(self.dataloader):
            self.dataloader_iterator = _InfiniteDataloaderIterator(self.dataloader)
        while self._iter < self._max_iters and not self.stop_training:
            self.runner.model.train()
            self.run_iter(next(self.dataloader_iterator))
            self._decide_current_val_interval()
            if (self.runner.val_loop is not None and self._iter >= self.val_begin
                    and (self._iter % self.val_interval == 0 or self._iter == self._max_iters)):
                self.runner.val_loop.run()
        self.runner.call_hook('after_train_epoch')
        self.runner.call_hook('after_train')
        return self.runner.model


# MMEngine's loops and the subclasses that resume them exactly.
RESUMABLE_LOOPS = {'EpochBasedTrainLoop': 'ResumableEpochBasedTrainLoop',
                   'IterBasedTrainLoop': 'ResumableIterBasedTrainLoop'}

# The hooks configs/_base_/training_guards.py lists (a config that lists one keeps its own
# settings).
TRAINING_HOOKS = ('FiniteLossHook', 'ExactResumeHook', 'PreemptionHook')


def _resumable_loop(loop: dict) -> dict:
    loop = dict(loop)
    loop_type = loop.get('type')
    by_epoch = loop.pop('by_epoch', None)
    if loop_type is None:  # MMEngine's short form: dict(by_epoch=..., max_...)
        loop_type = 'EpochBasedTrainLoop' if by_epoch else 'IterBasedTrainLoop'
    elif by_epoch is not None and loop_type in (*RESUMABLE_LOOPS, *RESUMABLE_LOOPS.values()):
        # The short form (MMPretrain's habit) merged onto a config that names the loop (ours):
        # MMEngine refuses both keys; a by_epoch that matches the loop is dropped.
        if bool(by_epoch) != ('Epoch' in loop_type):
            other = 'IterBasedTrainLoop' if by_epoch is False else 'EpochBasedTrainLoop'
            raise ValueError(
                f'train_cfg: by_epoch={by_epoch} contradicts type={loop_type!r}, which the '
                f"config's base names; write train_cfg=dict(_delete_=True, "
                f"type='Resumable{other}', ...)")
    if loop_type in RESUMABLE_LOOPS:
        loop_type = RESUMABLE_LOOPS[loop_type]
    elif loop_type not in RESUMABLE_LOOPS.values():
        print_log(f"train_cfg type {loop_type!r} is not one of MMEngine's two loops: it is "
                  'kept, and a resume continues at epoch boundaries only', logger='current',
                  level=30)
    loop['type'] = loop_type
    return loop


def add_training_guards(runner: Runner) -> None:
    """Before ``train()`` builds the loops (idempotent): MMEngine's loops become resumable,
    the :data:`TRAINING_HOOKS` a config leaves out are added and logged (its ``custom_hooks``
    replaces its base's list, which would drop the preemption checkpoint silently), and
    validation and test data workers die with their process."""
    if isinstance(runner._train_loop, dict):
        runner._train_loop = _resumable_loop(runner._train_loop)
    present = {type(hook).__name__ for hook in runner.hooks}
    added = [name for name in TRAINING_HOOKS if name not in present]
    for name in added:
        runner.register_hook(dict(type=name))
    if added:
        runner.logger.info("Training guards added (not in the config's custom_hooks): "
                           + ', '.join(added))
    for loader in (runner._val_dataloader, runner._test_dataloader):
        if isinstance(loader, dict):
            guard_dataloader_workers(loader)


class RunConfig(Config):
    """A ``Config`` that formats ``pretty_text`` (yapf: 0.2 s for a Mask R-CNN config, asked
    for when the runner starts and at every checkpoint save) again only after a change.

    Example::

        >>> RunConfig.of(Config(dict(a=1))).pretty_text == Config(dict(a=1)).pretty_text
        True
    """

    @classmethod
    def of(cls, cfg: Config) -> 'RunConfig':
        """``cfg`` as a ``RunConfig``, its contents shared (as ``copy.copy`` shares them)."""
        run_cfg = cls.__new__(cls)
        run_cfg.__dict__.update(cfg.__dict__)
        return run_cfg

    @property
    def pretty_text(self) -> str:
        state = (self.__dict__.get('_format_python_code'), self.to_dict())
        formatted = self.__dict__.get('_formatted')  # __dict__: __getattr__ reads the config
        try:
            if formatted is not None and formatted[0] == state:
                return formatted[1]
        except (TypeError, ValueError):  # a value without a plain ==, e.g. an array
            pass
        text = super().pretty_text
        object.__setattr__(self, '_formatted', (copy.deepcopy(state), text))
        return text


@RUNNERS.register_module()
class ExactResumeRunner(Runner):
    """MMEngine's ``Runner`` whose ``train()`` first adds :func:`add_training_guards`, whose
    ``resume()`` gives the loop the checkpoint's data position and generators, and whose
    ``compile`` compiles the model's backbone and neck for training, validation and testing
    (:mod:`.compile`); its config is a :class:`RunConfig`. Arguments as ``Runner``, and
    ``compile`` (bool or dict, default None: the config's key), as MMEngine's
    ``FlexibleRunner`` takes it; either way its options are checked here, before anything
    runs, and a ``compile`` argument that differs from the config's is refused.

    Example::

        >>> runner = ExactResumeRunner(model=..., work_dir='work', compile=dict(backend='eager'))
    """

    def __init__(self, *args, cfg: Optional[Union[Config, dict]] = None,
                 compile: Optional[Union[bool, dict]] = None, **kwargs):
        if isinstance(cfg, Config):
            cfg = RunConfig.of(cfg)
        super().__init__(*args, cfg=cfg, **kwargs)
        if compile is not None:
            given = self.cfg.get('compile')
            if given is not None and given != compile:
                raise ValueError(f'compile={compile!r} was passed and the config says '
                                 f'compile={given!r}; give one of them')
            self.cfg['compile'] = compile
        compile_options(self.cfg.get('compile'))  # a bad option stops here

    def train(self):
        add_training_guards(self)
        return super().train()

    def _maybe_compile(self, target: str) -> None:
        # The config's `compile` compiles the model's parts, not MMEngine's train_step.
        compiled = compile_model(self.model, self.cfg.get('compile'))
        if compiled:
            self.logger.info(f'Compiled (torch.compile, in place): {", ".join(compiled)}; '
                             'the first iterations of each new input size take longer.')

    def val(self):
        self._maybe_compile('val')
        return super().val()

    def test(self):
        self._maybe_compile('test')
        return super().test()

    def load_checkpoint(self, filename: str, *args, **kwargs):
        checkpoint = super().load_checkpoint(filename, *args, **kwargs)
        self._resume_state = checkpoint.get('resume_state')  # for resume(), which calls this
        return checkpoint

    def resume(self, filename: str, *args, **kwargs) -> None:
        super().resume(filename, *args, **kwargs)
        if isinstance(self.train_loop, _ResumableLoop):
            self.train_loop.resume_from(self._resume_state)
