"""Exact resume: every rank's random generators and data position, saved with each checkpoint
(:class:`ExactResumeHook`) and given back by :class:`~cvt_mm.engine.runner.ExactResumeRunner`
to its loop, so that a resumed run trains on the same batches, with the same augmentations
and random draws, as the uninterrupted run (docs/cluster.md, "Exact resume").

The data position rests on torchdata's ``StatefulDataLoader``: its snapshot holds the
sampler's position, the workers' round-robin and each worker's dataset state, which
:class:`WorkerRandomState` makes the worker's generators. Where no snapshot fits (another
number of processes or of workers) the loader starts at the batch by drawing and discarding
the indices before it (:class:`SkippingBatchSampler`): the same data, not the same
augmentations.
"""
from __future__ import annotations

import random
import sys
from itertools import islice
from typing import TYPE_CHECKING, Optional

import numpy as np
import torch
import torch.distributed as torch_dist
from mmengine.dist import get_dist_info
from mmengine.hooks import CheckpointHook, Hook
from mmengine.registry import HOOKS

from .flags import flag_group
from .workers import guarded_worker_init_cfg

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

__all__ = ['capture_random_states', 'restore_random_states', 'WorkerRandomState',
           'SkippingBatchSampler', 'stateful_train_dataloader', 'is_stateful', 'data_state',
           'start_loader_at', 'ExactResumeHook']


def capture_random_states() -> dict:
    """Python's, NumPy's, torch's and (when initialised) CUDA's generator states, in types that
    safe checkpoint loading accepts."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    states = dict(python=random.getstate(),
                  numpy=(np_kind, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos),
                         int(np_has_gauss), float(np_gauss)),
                  torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state()
    return states


def restore_random_states(states: dict) -> None:
    """Set the generators to :func:`capture_random_states`' states (on any device)."""
    version, internal, gauss = states['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states['numpy']
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states['torch'].cpu())
    if states.get('cuda') is not None and torch.cuda.is_available():
        cuda = states['cuda']
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, (list, tuple)) else cuda.cpu())


class WorkerRandomState:
    """Dataset wrapper whose state (torchdata's ``Stateful`` protocol) is the generators of the
    data-loader worker it runs in; empty in the main process, whose generators
    :class:`ExactResumeHook` saves. Other attributes are the wrapped dataset's.

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
    """Batch sampler wrapper whose next iteration can begin at a given batch, the batches
    before it drawn (bucketing samplers reach the same state) and discarded, none loaded.

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
        """Draw and yield nothing until :meth:`skip_next`: for a loop that makes its iterator
        before it knows where to start (an ``InfiniteSampler`` continues across iterators)."""
        self._skip = None

    def __iter__(self):
        # Read at the first draw, not at iter(): a DataLoader iterator calls iter() on its
        # batch sampler twice when it is created.
        skip, self._skip = self._skip, 0
        if skip is not None:
            yield from islice(self.batch_sampler, skip, None)


def stateful_train_dataloader(runner, cfg: dict) -> 'StatefulDataLoader':
    """The train dataloader of ``cfg`` (built by ``Runner.build_dataloader``) as a
    ``StatefulDataLoader`` snapshotting every batch, its dataset in :class:`WorkerRandomState`,
    its batch sampler in :class:`SkippingBatchSampler`, guarded workers and a generator of its
    own for the workers' base seed (drawn from the global one, a resumed run's new iterator
    would shift the training's random stream).

    Args:
        runner (Runner): the runner (its seed and randomness settings).
        cfg (dict): the ``train_dataloader`` config.
    """
    # Imported here: `import cvt_mm` registers the loops without loading torchdata.
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = dict(cfg)
    # Kept out of the config MMEngine deep-copies: a torch.Generator pickles only from 2.4.
    generator = cfg.pop('generator', None) or torch.Generator().manual_seed(runner.seed)
    cfg.setdefault('worker_init_fn', guarded_worker_init_cfg(runner.seed))
    built = runner.build_dataloader(
        cfg, seed=runner.seed, diff_rank_seed=runner._randomness_cfg.get('diff_rank_seed', False))
    return StatefulDataLoader(
        WorkerRandomState(built.dataset), batch_sampler=SkippingBatchSampler(built.batch_sampler),
        num_workers=built.num_workers, collate_fn=built.collate_fn, pin_memory=built.pin_memory,
        timeout=built.timeout, worker_init_fn=built.worker_init_fn,
        multiprocessing_context=built.multiprocessing_context, generator=generator,
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
    """Make ``loader``'s next iteration begin at batch ``batch`` of its epoch: exactly from a
    :func:`data_state` saved there, else by drawing and discarding the indices before it. Call
    it once the sampler's epoch is set, and iterate the epoch even when ``batch`` is its end
    (a state saved after its last batch still has the epoch's end to reach)."""
    loader.batch_sampler.skip_next(batch if state is None else 0)  # and ends a hold()
    if state is None:
        return
    loader.load_state_dict(state['loader'])
    # The restored iterator is made now (torchdata's state_dict() makes it, and the next
    # iter() returns it): its draw of a base seed, then overwritten by the saved one, precedes
    # the restore of the generator that the next epoch's new workers draw from.
    loader.state_dict()
    loader.generator.set_state(state['generator'])


def _checkpoint_due(runner, event: str) -> bool:
    """Whether a ``CheckpointHook`` saves at this ``after_train_iter`` (``'iter'``) or
    ``after_train_epoch`` (``'epoch'``), by its own conditions."""
    for hook in runner.hooks:
        if not isinstance(hook, CheckpointHook) or hook.by_epoch != (event == 'epoch'):
            continue
        if event == 'iter' and (hook.every_n_train_iters(runner, hook.interval, hook.save_begin)
                                or (hook.save_last and hook.is_last_train_iter(runner))):
            return True
        if event == 'epoch' and (hook.every_n_epochs(runner, hook.interval, hook.save_begin)
                                 or (hook.save_last and hook.is_last_train_epoch(runner))):
            return True
    return False


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Save every rank's random states and data position in each checkpoint
    (``checkpoint['resume_state']``: ``world_size``, ``epoch``, ``batch`` done in it,
    ``epoch_length``, and per rank ``random_states`` and ``data_states``); validation inside
    training gives the generators back as it found them. The states are gathered to rank 0
    (one collective on :func:`~cvt_mm.engine.flags.flag_group`) only where a
    ``CheckpointHook`` or :class:`~cvt_mm.engine.hooks.PreemptionHook` saves.
    :class:`~cvt_mm.engine.runner.ExactResumeRunner` restores them on resume.
    """
    # After ParamSchedulerHook (LOW, 70) and before CheckpointHook (VERY_LOW, 90).
    priority = 80

    def __init__(self):
        self._collected: Optional[dict] = None
        self._around_val: Optional[dict] = None

    def collect(self, runner, epoch: int, batch: int) -> None:
        """Gather every rank's states for the checkpoint about to be written at data position
        (``epoch``, ``batch`` done). A collective: every rank calls it."""
        rank, world_size = get_dist_info()
        loader = runner.train_loop.dataloader
        states = (capture_random_states(), data_state(loader) if is_stateful(loader) else None)
        gathered = [states]
        if world_size > 1:  # rank 0 writes the checkpoint; the others get None
            gathered = [None] * world_size if rank == 0 else None
            torch_dist.gather_object(states, gathered, dst=0, group=flag_group())
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
            # A save no schedule announced (a best checkpoint after validation): this rank's
            # generators only, no data position.
            collected = dict(world_size=1, random_states=[capture_random_states()])
        checkpoint['resume_state'] = collected

    def before_val(self, runner) -> None:
        self._around_val = capture_random_states()

    def after_val(self, runner) -> None:
        if self._around_val is not None:
            restore_random_states(self._around_val)
            self._around_val = None
