"""Training-engine pieces for MMEngine runners. Importing it registers them:

* :mod:`.distributed`: the DDP wrapper for distributed training without CUDA;
* :mod:`.fileio`: atomic writes of checkpoints and of the ``last_checkpoint`` pointer;
* :mod:`.data`: per-sample augmentation seeds, a batch sampler that starts part-way, data
  workers that die with their process;
* :mod:`.loops`: MMEngine's training loops, resumable mid-epoch without reloading data;
* :mod:`.random_state`: every rank's random states saved and restored (``ExactResumeHook``);
* :mod:`.preemption`: checkpoint and exit on SIGTERM/SIGUSR1, progress for restarts;
* :mod:`.resume`: finding the checkpoint to continue from, restarts and requeues;
* :mod:`.hooks`: stopping at the first non-finite loss, or when model and data disagree on
  the classes;
* :mod:`.optim`: layer-wise learning-rate decay for detectors and segmentors;
* :mod:`.launch`: what ``tools/train.py`` and ``tools/test.py`` do to a config and launcher;
* :mod:`.allocator`: glibc's malloc made to reuse large freed blocks in those processes.
"""
from . import data, distributed, fileio, hooks, loops, optim, preemption, random_state  # noqa: F401,E501  (registrations)
from .allocator import reuse_freed_memory
from .data import ResumableBatchSampler, SampleIndex, SeededSampleDataset, guard_data_worker
from .distributed import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .fileio import AtomicLocalBackend, write_atomically
from .hooks import ClassesCheckHook, FiniteLossHook
from .loops import ResumableEpochBasedTrainLoop, ResumableIterBasedTrainLoop
from .optim import BackboneLayerDecayOptimWrapperConstructor
from .preemption import (
    PREEMPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    HeartbeatHook,
    PreemptionHook,
    TrainingPreempted,
)
from .random_state import ExactResumeHook
from .resume import find_resumable_checkpoint, restart_count

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'AtomicLocalBackend',
           'write_atomically', 'FiniteLossHook', 'ClassesCheckHook', 'ExactResumeHook',
           'PreemptionHook', 'HeartbeatHook', 'TrainingPreempted',
           'PREEMPTED_EXIT_CODE',
           'STOPPED_EXIT_CODE', 'find_resumable_checkpoint', 'restart_count',
           'ResumableBatchSampler', 'SampleIndex', 'SeededSampleDataset', 'guard_data_worker',
           'ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop',
           'BackboneLayerDecayOptimWrapperConstructor', 'reuse_freed_memory']
