"""What the training loops' ``StatefulDataLoader`` costs beside torch's ``DataLoader``: time per
batch with a snapshot after every batch, the size of the saved state, and the time from a
restore to the first batch.

    python -m benchmarks.data_loading [--batches 120] [--rounds 3] [--workers 2]

Each sample does a fixed amount of NumPy work with random draws (a stand-in for decoding and
augmenting an image); both loaders run alternately in the same process, with persistent
workers, and the medians are printed.
"""
from __future__ import annotations

import argparse
import io
import statistics
import time
from typing import List, Optional

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from cvt_mm.engine.exact_resume import (
    SkippingBatchSampler,
    WorkerRandomState,
    data_state,
    start_loader_at,
)


class AugmentedImages:
    """``size`` samples of a 3x224x224 image, flipped and jittered at random."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        image = np.random.rand(3, 224, 224).astype(np.float32)
        if np.random.rand() < 0.5:
            image = image[:, :, ::-1]
        return torch.from_numpy(np.ascontiguousarray(image * np.random.uniform(0.8, 1.2)))


def _loaders(batches: int, workers: int):
    dataset = AugmentedImages(2 * batches)
    common = dict(num_workers=workers, persistent_workers=workers > 0)
    plain = DataLoader(dataset, batch_size=2, sampler=RandomSampler(dataset), **common)
    stateful = StatefulDataLoader(
        WorkerRandomState(dataset),
        batch_sampler=SkippingBatchSampler(BatchSampler(RandomSampler(dataset), 2, False)),
        generator=torch.Generator().manual_seed(0), snapshot_every_n_steps=1, **common)
    return plain, stateful


def _epoch_seconds(loader) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - start


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=int, default=120, help='batches of 2 per epoch')
    parser.add_argument('--rounds', type=int, default=3, help='epochs of each loader, alternated')
    parser.add_argument('--workers', type=int, default=2, help='data workers per loader')
    args = parser.parse_args(argv)
    plain, stateful = _loaders(args.batches, args.workers)
    _epoch_seconds(plain), _epoch_seconds(stateful)  # workers started, caches warm
    times = {'DataLoader': [], 'StatefulDataLoader': []}
    for _ in range(args.rounds):
        times['DataLoader'].append(_epoch_seconds(plain))
        times['StatefulDataLoader'].append(_epoch_seconds(stateful))
    per_batch = {name: 1e3 * statistics.median(t) / args.batches for name, t in times.items()}
    for name, ms in per_batch.items():
        print(f'{name:20s} {ms:7.2f} ms/batch (median of {args.rounds} epochs)')
    print(f'ratio StatefulDataLoader / DataLoader: '
          f'{per_batch["StatefulDataLoader"] / per_batch["DataLoader"]:.3f}')

    stream = iter(stateful)
    for _ in range(args.batches // 2):
        next(stream)
    state = data_state(stateful)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    print(f'saved state after {args.batches // 2} batches: {buffer.tell() / 1024:.1f} KiB '
          f'({args.workers} workers)')
    del stream
    _, restored = _loaders(args.batches, args.workers)
    start = time.perf_counter()
    start_loader_at(restored, args.batches // 2, state)
    next(iter(restored))
    print(f'restore to first batch: {1e3 * (time.perf_counter() - start):.0f} ms '
          '(workers started, the indices before it drawn)')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
