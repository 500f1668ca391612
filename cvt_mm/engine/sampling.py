"""Training data that resumes exactly, on every rank, with persistent workers.

MMEngine seeds each data-loader worker once, from (seed, rank, worker id). A worker's random
augmentations therefore depend on how many samples that worker has drawn before, which a
resume cannot restore: persistent workers start their streams again, and which worker loads
which sample depends on timing. Here each sample's randomness is a function of the sample's
place in the run instead:

* :class:`ResumableBatchSampler` wraps the run's batch sampler. It gives every index it yields
  a seed derived from (run seed, sampler epoch, rank, position in this rank's stream) as a
  :class:`SampleIndex`, and can start an iteration at batch ``n`` by drawing and discarding the
  first ``n`` batches of indices (no image is read for them).
* :class:`SeededSampleDataset` wraps the dataset: for a :class:`SampleIndex` it seeds Python's,
  NumPy's and torch's generators from the index's seed, runs the wrapped dataset's
  ``__getitem__`` (pipeline included) and puts the caller's generator states back.

The training loops of :mod:`cvt_mm.engine.loops` install both, with data workers that die with
their process (:mod:`cvt_mm.engine.workers`); nothing else is needed.

Example (what the loops do to a train dataloader config)::

    train_dataloader = dict(
        batch_size=2, num_workers=2, persistent_workers=True,
        sampler=dict(type='DefaultSampler', shuffle=True),
        batch_sampler=dict(type='ResumableBatchSampler', seed=0,
                           batch_sampler=dict(type='AspectRatioBatchSampler')),
        worker_init_fn=dict(type='guard_data_worker', seed=0),
        dataset=dict(type='SeededSampleDataset', dataset=dict(type='CocoDataset', ...)))
"""
from __future__ import annotations

import contextlib
import random
from typing import Iterator, List, Optional

import numpy as np
import torch
from mmengine.dist import get_dist_info
from mmengine.registry import DATA_SAMPLERS, DATASETS
from torch.utils.data import BatchSampler

from .workers import guarded_worker_init_cfg

__all__ = ['SampleIndex', 'derive_sample_seed', 'seeded_generators', 'SeededSampleDataset',
           'ResumableBatchSampler', 'resumable_dataloader_cfg']


class SampleIndex(int):
    """A dataset index that carries the seed of the sample's random transforms.

    It is an ``int`` everywhere (batch samplers, ``get_data_info``, list indexing); only
    :class:`SeededSampleDataset` reads ``sample_seed``. Pickles with its seed, so it reaches
    data-loader workers intact.

    Example::

        >>> i = SampleIndex(7, sample_seed=123)
        >>> i + 1, i.sample_seed
        (8, 123)
    """

    sample_seed: int

    def __new__(cls, index: int, sample_seed: int) -> 'SampleIndex':
        obj = super().__new__(cls, index)
        obj.sample_seed = sample_seed
        return obj

    def __reduce__(self):
        return SampleIndex, (int(self), self.sample_seed)

    def __repr__(self) -> str:
        return f'SampleIndex({int(self)}, sample_seed={self.sample_seed})'


def derive_sample_seed(seed: int, epoch: int, rank: int, position: int) -> int:
    """The 63-bit seed of the sample at ``position`` of rank ``rank``'s stream in ``epoch``
    of the run seeded with ``seed`` (NumPy's ``SeedSequence`` mixes the four numbers, so
    nearby keys give unrelated seeds)."""
    words = np.random.SeedSequence([seed & (2**63 - 1), epoch, rank, position]).generate_state(
        2, np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    # The CPU generator only: torch.manual_seed also seeds every accelerator backend, which
    # is slower (docs/benchmarks.md), and data transforms draw on the CPU.
    torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def seeded_generators(seed: int):
    """Seed Python's ``random``, NumPy's global generator and torch's CPU generator from
    ``seed`` for the block. In the main process their states are restored afterwards, so the
    training's own random stream is untouched; in a data-loader worker nothing else draws
    from them, and the restore, the dearer half, is skipped (docs/benchmarks.md)."""
    if torch.utils.data.get_worker_info() is not None:
        _seed_all(seed)
        yield
        return
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    _seed_all(seed)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])


@DATASETS.register_module()
class SeededSampleDataset:
    """Dataset wrapper: the random transforms of each sample draw from the seed its
    :class:`SampleIndex` carries, whichever process or worker loads it.

    Plain integer indices go to the wrapped dataset unchanged. Every other attribute
    (``metainfo``, ``get_data_info``, ``full_init``, ...) is the wrapped dataset's.

    Args:
        dataset (dict | Dataset): the dataset, or its config (built in the current scope).

    Example::

        >>> wrapped = SeededSampleDataset(dict(type='CocoDataset', ...))
        >>> wrapped[SampleIndex(3, sample_seed=42)]  # the same result in every process
    """

    def __init__(self, dataset):
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        seed = getattr(index, 'sample_seed', None)
        if seed is None:
            return self.dataset[index]
        with seeded_generators(seed):
            return self.dataset[int(index)]

    def __getattr__(self, name: str):
        # Dunders and our own attribute are never forwarded (unpickling looks them up before
        # ``dataset`` exists).
        if name == 'dataset' or name.startswith('__'):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f'SeededSampleDataset({self.dataset!r})'


@DATA_SAMPLERS.register_module()
class ResumableBatchSampler:
    """Batch sampler wrapper that seeds each sample by its place in the run and can start an
    iteration part-way.

    Each yielded index is a :class:`SampleIndex` whose seed is :func:`derive_sample_seed` of
    (``seed``, the sampler's ``epoch``, this process's rank, the index's position in this
    iteration of the stream). :meth:`start_at` makes the next iteration begin at a given batch:
    the batches before it are drawn from the wrapped batch sampler (so bucketing batch samplers
    such as MMDetection's ``AspectRatioBatchSampler`` reach the same state) and discarded, and
    their positions still count. :meth:`hold` makes iterations empty until :meth:`start_at` is
    called, for loops that create their data iterator before they know where to start.

    Args:
        sampler (Sampler): the index sampler (MMEngine passes it).
        batch_size (int): samples per batch (MMEngine passes it).
        batch_sampler (dict | Sampler, optional): the batch sampler to wrap, or its config;
            by default torch's ``BatchSampler``. Defaults to None.
        drop_last (bool): for the default batch sampler only. Defaults to False.
        seed (int): the run's seed. Defaults to 0.

    Example::

        >>> bs = ResumableBatchSampler(DefaultSampler(dataset, seed=0), batch_size=2, seed=0)
        >>> bs.start_at(5)  # the next epoch begins with its sixth batch
    """

    def __init__(self, sampler, batch_size: int, batch_sampler=None, drop_last: bool = False,
                 seed: int = 0):
        if batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        elif isinstance(batch_sampler, dict):
            batch_sampler = DATA_SAMPLERS.build(
                batch_sampler, default_args=dict(sampler=sampler, batch_size=batch_size))
        self.batch_sampler = batch_sampler
        self.batch_size = batch_size
        self.seed = int(seed)
        self.rank = get_dist_info()[0]
        self._start: Optional[int] = 0

    @property
    def sampler(self):
        """The index sampler (MMEngine's ``DistSamplerSeedHook`` sets its epoch)."""
        return self.batch_sampler.sampler

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def hold(self) -> None:
        """Iterations yield nothing until :meth:`start_at` is called."""
        self._start = None

    def start_at(self, batch: int) -> None:
        """Begin the next iteration with batch number ``batch`` (0 = from the start)."""
        if batch < 0:
            raise ValueError(f'start_at: batch must be >= 0, got {batch}')
        self._start = int(batch)

    def __iter__(self) -> Iterator[List[SampleIndex]]:
        # The start is read when the first batch is drawn, not here: a DataLoader iterator
        # calls iter() on its batch sampler twice when it is created.
        if self._start is None:
            return
        start, self._start = self._start, 0
        epoch = int(getattr(self.sampler, 'epoch', 0))
        position = 0
        for number, batch in enumerate(self.batch_sampler):
            if number >= start:
                yield [SampleIndex(index, derive_sample_seed(self.seed, epoch, self.rank,
                                                             position + k))
                       for k, index in enumerate(batch)]
            position += len(batch)


def _has_type(cfg, name: str) -> bool:
    return isinstance(cfg, dict) and cfg.get('type') == name


def resumable_dataloader_cfg(cfg: dict, seed: int) -> dict:
    """A copy of a train dataloader config with the dataset wrapped in
    :class:`SeededSampleDataset`, the batch sampler in :class:`ResumableBatchSampler` and
    :func:`guard_data_worker` as ``worker_init_fn``; parts already wrapped are kept.

    Args:
        cfg (dict): the ``train_dataloader`` config.
        seed (int): the run's seed (``runner.seed``).
    """
    cfg = {k: v for k, v in cfg.items()}
    if not _has_type(cfg.get('dataset'), 'SeededSampleDataset'):
        cfg['dataset'] = dict(type='SeededSampleDataset', dataset=cfg['dataset'])
    batch_sampler = cfg.pop('batch_sampler', None)
    if not _has_type(batch_sampler, 'ResumableBatchSampler'):
        batch_sampler = dict(type='ResumableBatchSampler', batch_sampler=batch_sampler,
                             drop_last=cfg.get('drop_last', False), seed=seed)
    cfg.pop('drop_last', None)  # the batch sampler's business now
    cfg['batch_sampler'] = batch_sampler
    # Each new data iterator draws a number from this generator; from the global one, the
    # draw would shift the training's random stream differently when a resumed run creates
    # its persistent-worker iterator where the uninterrupted run only reset it.
    cfg.setdefault('generator', torch.Generator().manual_seed(seed))
    cfg.setdefault('worker_init_fn', guarded_worker_init_cfg(seed))
    return cfg
