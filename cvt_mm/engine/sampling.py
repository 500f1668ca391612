"""Training data that resumes exactly, on every rank, with persistent workers: torchdata's
``StatefulDataLoader``.

A data-loader worker's random augmentations depend on how many samples it has drawn before,
and which worker loads which batch depends on where the loader's round-robin stands; a resumed
run with fresh workers would augment differently. ``StatefulDataLoader`` snapshots, with every
batch it yields, the sampler's position, the round-robin and each worker's dataset state;
:class:`WorkerRandomState` makes that dataset state the worker's generators. A loader restored
from a snapshot continues with the same batches, loaded by the same workers with the same
augmentations (persistent workers or not), and draws only indices for the batches before it.

:func:`stateful_train_dataloader` builds such a loader from a train dataloader config;
:func:`data_state` and :func:`start_loader_at` are what
:class:`~cvt_mm.engine.hooks.ExactResumeHook` and the loops of :mod:`cvt_mm.engine.loops` call
on save and resume. Where no snapshot fits (another number of processes or of workers), the
loader starts at a batch by drawing and discarding the indices before it
(:class:`SkippingBatchSampler`): the same share of the data, not the same augmentations.

Example::

    loader = stateful_train_dataloader(runner, runner.cfg.train_dataloader)
    state = data_state(loader)        # after some batches: saved with the checkpoint
    start_loader_at(new_loader, batch=5, state=state)  # in the resumed run
"""
from __future__ import annotations

import sys
from itertools import islice
from typing import TYPE_CHECKING, Optional

import torch

from .random_state import capture_random_states, restore_random_states
from .workers import guarded_worker_init_cfg

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

__all__ = ['WorkerRandomState', 'SkippingBatchSampler', 'stateful_train_dataloader',
           'is_stateful', 'data_state', 'start_loader_at']


class WorkerRandomState:
    """Dataset wrapper whose state (torchdata's ``Stateful`` protocol) is the generators of the
    data-loader worker it runs in: Python's, NumPy's and torch's.

    In the main process the state is empty: there the generators are the training's, which
    :class:`~cvt_mm.engine.hooks.ExactResumeHook` saves at the iteration boundary. Every other
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
