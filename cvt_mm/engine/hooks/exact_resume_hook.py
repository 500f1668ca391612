"""Every rank's random states and the data position in every checkpoint, restored on resume
(:class:`ExactResumeHook`; the states themselves: :mod:`cvt_mm.engine.random_state`, the
data side: :mod:`cvt_mm.engine.sampling` and :mod:`cvt_mm.engine.loops`).

MMEngine resumes weights, optimizer, schedulers and the iteration, then seeds its generators
afresh, so drop path, RoI sampling and every other draw of the training processes differ
after a resume. :class:`ExactResumeHook` gathers the Python, NumPy, torch and CUDA generator
states of all ranks to the rank that writes the checkpoint, with the data position (epoch,
batches done), and on resume gives each rank its own states back at the point that matches
the save, before the first batch of the resumed run is loaded.

Example (a config used with another launcher than ``tools/train.py``)::

    custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
    train_cfg = dict(type='ResumableEpochBasedTrainLoop', max_epochs=12)
    custom_hooks = [dict(type='ExactResumeHook')]
"""
from __future__ import annotations

from typing import Optional

from mmengine.dist import gather_object, get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS
from mmengine.runner.loops import IterBasedTrainLoop

from ..random_state import capture_random_states, restore_random_states
from ..sampling import data_state, is_stateful

__all__ = ['ExactResumeHook']

def _checkpoint_hooks(runner) -> list:
    return [h for h in runner.hooks if isinstance(h, CheckpointHook)]


def _checkpoint_due(runner, event: str) -> bool:
    """Whether a ``CheckpointHook`` of the runner saves at this ``after_train_iter`` or
    ``after_train_epoch`` (its own conditions)."""
    for hook in _checkpoint_hooks(runner):
        if event == 'iter' and not hook.by_epoch and (
                hook.every_n_train_iters(runner, hook.interval, hook.save_begin)
                or (hook.save_last and hook.is_last_train_iter(runner))):
            return True
        if event == 'epoch' and hook.by_epoch and (
                hook.every_n_epochs(runner, hook.interval, hook.save_begin)
                or (hook.save_last and hook.is_last_train_epoch(runner))):
            return True
    return False


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Save every rank's random states and the data position in each checkpoint; restore
    them on resume, so that the resumed run continues exactly as the uninterrupted one.

    What is saved (``checkpoint['resume_state']``): ``world_size``, ``epoch`` and ``batch``
    (batches of that epoch done), ``epoch_length``, and per rank ``random_states`` and
    ``data_states`` (the ``StatefulDataLoader``'s snapshot: sampler position and every data
    worker's generators, :func:`~cvt_mm.engine.sampling.data_state`).
    States are gathered (one collective) only at the iterations and epochs where a
    ``CheckpointHook`` saves, and when :class:`~cvt_mm.engine.hooks.PreemptionHook`
    saves. Validation inside training restores the states it found, so it never shifts the
    training's random streams.

    Resuming with another number of processes works and says that it is not exact: the epoch
    continues at the same fraction of its batches, ranks that existed before get their states
    back, new ranks keep fresh seeds.

    Exactness needs the loops of :mod:`cvt_mm.engine.loops` (``tools/train.py`` uses them);
    MMEngine's loops train a mid-epoch checkpoint's epoch again from its start.
    """
    # After ParamSchedulerHook (LOW, 70) and before CheckpointHook (VERY_LOW, 90).
    priority = 80

    def __init__(self):
        self._collected: Optional[dict] = None
        self._pending: Optional[dict] = None  # this rank's states, until they are restored
        self._around_val: Optional[dict] = None
        self._loaded: Optional[dict] = None

    # --------------------------------------------------------------------------- saving
    def collect(self, runner, epoch: int, batch: int) -> None:
        """Gather every rank's states to rank 0 for the checkpoint about to be written at
        data position (``epoch``, ``batch`` done). A collective: every rank calls it."""
        rank, world_size = get_dist_info()
        loader = runner.train_loop.dataloader
        states = (capture_random_states(),
                  data_state(loader) if is_stateful(loader) else None)
        # Rank 0 writes the checkpoint; the other ranks get None.
        gathered = gather_object(states, dst=0) if world_size > 1 else [states]
        randoms, datas = map(list, zip(*gathered)) if gathered else (None, None)
        self._collected = dict(iter=runner.iter, world_size=world_size, epoch=epoch, batch=batch,
                               epoch_length=len(loader), random_states=randoms,
                               data_states=datas)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if _checkpoint_due(runner, 'iter'):
            self.collect(runner, epoch=runner.epoch, batch=batch_idx + 1)

    def after_train_epoch(self, runner) -> None:
        if _checkpoint_due(runner, 'epoch'):
            self.collect(runner, epoch=runner.epoch + 1, batch=0)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        collected, self._collected = self._collected, None
        if collected is None or collected.pop('iter') != runner.iter:
            # A save no CheckpointHook schedule announced (e.g. a best checkpoint after
            # validation): this rank's states only, no data position.
            collected = dict(world_size=1, random_states=[capture_random_states()])
        checkpoint['resume_state'] = collected

    # --------------------------------------------------------------------------- loading
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._loaded = checkpoint.get('resume_state')

    def before_train(self, runner) -> None:
        # Applied here, when the runner has set the resumed iteration: a checkpoint loaded
        # for fine-tuning (``load_from`` without resume) leaves the iteration at 0.
        state, self._loaded = self._loaded, None
        if state is None or runner.iter == 0:
            return
        rank, world_size = get_dist_info()
        loop = runner.train_loop
        batch = state.get('batch')
        if batch is not None and state['world_size'] != world_size:
            batch = self._rescale(runner, state, world_size)
        if batch is not None and hasattr(loop, 'resume_batch'):
            loop.resume_batch = batch
            data = state.get('data_states', [None] * world_size)[rank] \
                if state['world_size'] == world_size else None
            workers = getattr(loop.dataloader, 'num_workers', None)
            if data is not None and data['num_workers'] != workers:
                print_log(f'Resuming a checkpoint written with {data["num_workers"]} data workers '
                          f'per process with {workers}: training continues at the same batch, '
                          'but the augmentations differ from the original run\'s (each worker '
                          f'draws its own random stream). Resume with {data["num_workers"]} '
                          'workers to continue exactly.', logger='current', level=30)
                data = None
            loop.resume_data = data
        states = state['random_states']
        if rank < len(states):
            self._pending = states[rank]

    @staticmethod
    def _rescale(runner, state: dict, world_size: int) -> int:
        saved_ws, batch = state['world_size'], state['batch']
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop):
            new = round(batch * saved_ws / world_size)
            where = f'iteration stream at batch {new} per process'
        else:
            length = len(loop.dataloader)
            new = min(length, round(batch * length / max(state['epoch_length'], 1)))
            where = f'epoch {state["epoch"] + 1} continues at batch {new + 1}/{length}'
        if get_dist_info()[0] == 0:
            print_log(
                f'Resuming a checkpoint written by {saved_ws} processes with {world_size}: '
                f'training continues, but not exactly as the original run would have. Each '
                f'process now sees other batches ({where}, the same share of the data), '
                'processes that did not exist before start from fresh random states. Resume '
                f'with {saved_ws} processes to continue exactly.', logger='current',
                level=30)
        return new

    def before_train_epoch(self, runner) -> None:
        # The first event of the resumed run at which the uninterrupted run had these states:
        # what lies between (the data iterator's creation, on its own generator) draws nothing
        # from them, and the first batch is loaded after it (in this process without workers).
        if self._pending is not None:
            restore_random_states(self._pending)
            self._pending = None

    # ------------------------------------------------------------------------ validation
    def before_val(self, runner) -> None:
        self._around_val = capture_random_states()

    def after_val(self, runner) -> None:
        if self._around_val is not None:
            restore_random_states(self._around_val)
            self._around_val = None
