"""Exact resume: every rank's random generators and data position saved with each checkpoint
and restored on resume (:class:`ExactResumeHook`), so that a resumed run trains on the same
batches, with the same augmentations and random draws, as the uninterrupted run.

MMEngine resumes weights, optimizer, schedulers and the iteration, then seeds its generators
afresh, so drop path, RoI sampling and every other draw differ after a resume; and its loops
train a mid-epoch checkpoint's epoch again from its start (or replay the batches). Here:

* **random states** (:func:`capture_random_states`, :func:`restore_random_states`): Python,
  NumPy, torch and CUDA generators, in types safe checkpoint loading accepts;
* **data position**, on torchdata's ``StatefulDataLoader``: with every batch it snapshots the
  sampler's position, the workers' round-robin and each worker's dataset state;
  :class:`WorkerRandomState` makes that state the worker's generators, so a loader restored
  from a snapshot (:func:`data_state`, :func:`start_loader_at`) continues with the same
  batches, loaded by the same workers with the same augmentations (persistent workers or not),
  and draws only indices for the batches before it. Where no snapshot fits (another number of
  processes or of workers) the loader starts at the batch by drawing and discarding the indices
  before it (:class:`SkippingBatchSampler`): the same share of the data, not the same
  augmentations;
* **the hook** that gathers both per rank into the checkpoint and gives them back; the loops
  that start the loader there are :mod:`cvt_mm.engine.runner`'s.

Example (a config not built on ours, used with another runner than ``ExactResumeRunner``)::

    custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
    train_cfg = dict(type='ResumableEpochBasedTrainLoop', max_epochs=12)
    custom_hooks = [dict(type='ExactResumeHook')]
"""
from __future__ import annotations

import random
import sys
from itertools import islice
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch
from mmengine.dist import gather_object, get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS
from mmengine.runner.loops import IterBasedTrainLoop

from .workers import guarded_worker_init_cfg

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

__all__ = ['capture_random_states', 'restore_random_states', 'WorkerRandomState',
           'SkippingBatchSampler', 'stateful_train_dataloader', 'is_stateful', 'data_state',
           'start_loader_at', 'ExactResumeHook']


# ---------------------------------------------------------------------------- random states
def capture_random_states() -> dict:
    """Python, NumPy, torch CPU and (when initialised) the current CUDA device's generator
    states, in types that safe checkpoint loading accepts (ints, tuples, tensors)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    states = dict(python=random.getstate(),
                  numpy=(np_kind, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos),
                         int(np_has_gauss), float(np_gauss)),
                  torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state()
    return states


def restore_random_states(states: dict) -> None:
    """Set the generators to states from :func:`capture_random_states` (tensors may come
    back on a GPU from ``map_location``; they are moved to the CPU)."""
    version, internal, gauss = states['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states['numpy']
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states['torch'].cpu())
    if states.get('cuda') is not None and torch.cuda.is_available():
        cuda = states['cuda']
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, (list, tuple)) else cuda.cpu())


# ---------------------------------------------------------------------------- data position
class WorkerRandomState:
    """Dataset wrapper whose state (torchdata's ``Stateful`` protocol) is the generators of the
    data-loader worker it runs in: Python's, NumPy's and torch's.

    In the main process the state is empty: there the generators are the training's, which
    :class:`ExactResumeHook` saves at the iteration boundary. Every other
    attribute (``metainfo``, ``get_data_info``, ...) is the wrapped dataset's.

    Args:
        dataset (Dataset): the training dataset.
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __getattr__(self, name: str):
        # Dunders and our own attribute are never forwarded (unpickling looks them up before
        # ``dataset`` exists).
        if name == 'dataset' or name.startswith('__'):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def state_dict(self) -> dict:
        return capture_random_states() if torch.utils.data.get_worker_info() else {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            restore_random_states(state)


class SkippingBatchSampler:
    """Batch sampler wrapper whose next iteration can begin at a given batch: the batches
    before it are drawn from the wrapped sampler (bucketing samplers such as MMDetection's
    ``AspectRatioBatchSampler`` reach the same state) and discarded, no sample loaded.

    Args:
        batch_sampler (Sampler): the batch sampler to wrap.
    """

    def __init__(self, batch_sampler):
        self.batch_sampler = batch_sampler
        self._skip: Optional[int] = 0

    @property
    def sampler(self):
        """The index sampler (MMEngine's ``DistSamplerSeedHook`` sets its epoch)."""
        return self.batch_sampler.sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def skip_next(self, batches: int) -> None:
        """Begin the next iteration with batch number ``batches`` (0 = from the start)."""
        if batches < 0:
            raise ValueError(f'skip_next: batches must be >= 0, got {batches}')
        self._skip = int(batches)

    def hold(self) -> None:
        """Iterations yield nothing, and draw nothing from the wrapped sampler, until
        :meth:`skip_next` is called: for loops that make their data iterator before they know
        where to start (MMEngine's iteration-based loop, whose ``InfiniteSampler`` continues
        one stream across iterators)."""
        self._skip = None

    def __iter__(self):
        # Read at the first draw, not at iter(): a DataLoader iterator calls iter() on its
        # batch sampler twice when it is created.
        skip, self._skip = self._skip, 0
        if skip is not None:
            yield from islice(self.batch_sampler, skip, None)


def stateful_train_dataloader(runner, cfg: dict) -> 'StatefulDataLoader':
    """The train dataloader of ``cfg`` (built by MMEngine's ``Runner.build_dataloader``) as a
    ``StatefulDataLoader`` snapshotting every batch, with its dataset in
    :class:`WorkerRandomState`, its batch sampler in :class:`SkippingBatchSampler`, data
    workers that die with their process and a generator of its own for the workers' base
    seed (drawn from the global one, a resumed run's new iterator would shift the training's
    random stream where the uninterrupted run only reset its persistent workers).

    Args:
        runner (Runner): the runner (its seed and randomness settings).
        cfg (dict): the ``train_dataloader`` config.
    """
    # Imported here: `import cvt_mm` registers the loops without loading torchdata.
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = dict(cfg)
    cfg.setdefault('generator', torch.Generator().manual_seed(runner.seed))
    cfg.setdefault('worker_init_fn', guarded_worker_init_cfg(runner.seed))
    built = runner.build_dataloader(
        cfg, seed=runner.seed, diff_rank_seed=runner._randomness_cfg.get('diff_rank_seed', False))
    return StatefulDataLoader(
        WorkerRandomState(built.dataset), batch_sampler=SkippingBatchSampler(built.batch_sampler),
        num_workers=built.num_workers, collate_fn=built.collate_fn, pin_memory=built.pin_memory,
        timeout=built.timeout, worker_init_fn=built.worker_init_fn,
        multiprocessing_context=built.multiprocessing_context, generator=built.generator,
        prefetch_factor=built.prefetch_factor, persistent_workers=built.persistent_workers,
        pin_memory_device=built.pin_memory_device, snapshot_every_n_steps=1)


def is_stateful(loader) -> bool:
    """Whether ``loader`` is a ``StatefulDataLoader`` (without importing torchdata)."""
    module = sys.modules.get('torchdata.stateful_dataloader')
    return module is not None and isinstance(loader, module.StatefulDataLoader)


def data_state(loader: 'StatefulDataLoader') -> dict:
    """Where ``loader`` stands, for a checkpoint: its snapshot after the last batch it yielded,
    the generator of its workers' base seeds and its number of workers."""
    return dict(loader=loader.state_dict(), generator=loader.generator.get_state(),
                num_workers=loader.num_workers)


def start_loader_at(loader: 'StatefulDataLoader', batch: int, state: Optional[dict] = None) -> None:
    """Make ``loader``'s next iteration begin at batch ``batch`` of its epoch: exactly, from a
    :func:`data_state` saved there, or by drawing and discarding the indices of the batches
    before it when ``state`` is None. Call it once the sampler's epoch is set, before the
    epoch's ``iter(loader)``, and iterate the epoch even when ``batch`` is its end (a state
    saved after an epoch's last batch, before the loader raised ``StopIteration``, still has
    that epoch's end to reach).
    """
    loader.batch_sampler.skip_next(batch if state is None else 0)  # and ends a hold()
    if state is None:
        return
    loader.load_state_dict(state['loader'])
    # The restored iterator is made now (torchdata's state_dict() makes it, and the next
    # iter() returns it): its draw of a base seed, then overwritten by the saved one, precedes
    # the restore of the generator that the next epoch's new workers draw from.
    loader.state_dict()
    loader.generator.set_state(state['generator'])


# --------------------------------------------------------------------------------- the hook
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
    worker's generators, :func:`~cvt_mm.engine.exact_resume.data_state`).
    States are gathered (one collective) only at the iterations and epochs where a
    ``CheckpointHook`` saves, and when :class:`~cvt_mm.engine.hooks.PreemptionHook`
    saves. Validation inside training restores the states it found, so it never shifts the
    training's random streams.

    Resuming with another number of processes works and says that it is not exact: the epoch
    continues at the same fraction of its batches, ranks that existed before get their states
    back, new ranks keep fresh seeds.

    Exactness needs the loops of :mod:`cvt_mm.engine.runner` (``tools/train.py`` uses them);
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
