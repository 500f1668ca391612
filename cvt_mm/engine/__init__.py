"""Training-engine pieces for MMEngine runners, one concern per module. Importing it
registers them. Which module to open for which behaviour: docs/development.md, "The engine".

Exact resume:

* :mod:`.runner`: ``ExactResumeRunner``, the runner our configs name, which adds the
  resumable loops and the training hooks when it trains;
* :mod:`.sampling`: torchdata's ``StatefulDataLoader`` with the workers' generators in its
  state, a batch sampler that starts part-way;
* :mod:`.loops`: MMEngine's training loops, resumable mid-epoch without reloading data;
* :mod:`.random_state`: capturing and restoring every random generator;
* :mod:`.resume`: which checkpoint a run continues from (``--resume``, restarts, requeues).

Hooks (:mod:`.hooks`, one per module): ``ExactResumeHook``, ``PreemptionHook``,
``HeartbeatHook``, ``FiniteLossHook``, ``ClassesCheckHook``; the small collectives they share
travel on the group of :mod:`.flags`.

Launching (what ``tools/train.py`` and ``tools/test.py`` call):

* :mod:`.cli`: command line to config; :mod:`.dataset_paths`: missing datasets named;
* :mod:`.slurm`: torch.distributed's environment from slurm's;
* :mod:`.process_group`: a process group restarts cannot hang on, and its teardown;
* :mod:`.distributed`: ``--launcher`` made to work; :mod:`.cpu_ddp`: DDP without CUDA;
* :mod:`.runner_setup`: building the runner a config names;
* :mod:`.workers`: data workers that die with their process;
* :mod:`.allocator`: glibc's malloc made to reuse large freed blocks.

Beside them: :mod:`.fileio` (atomic checkpoint writes), :mod:`.layer_decay` (layer-wise
learning-rate decay for detectors and segmentors; :mod:`.optim` registers it).

Importing this package registers what configs name by ``type`` and loads no launch module
(``distributed``, ``process_group``, ``slurm``, ``allocator``) and no toolbox model zoo: the
tools import those; the two names below that live there are loaded on first use.
"""
import importlib

from . import cpu_ddp, fileio, hooks, loops, optim, runner, sampling, workers  # noqa: F401  (registrations)
from .cpu_ddp import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .fileio import AtomicLocalBackend, write_atomically
from .hooks import (
    PREEMPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    ClassesCheckHook,
    ExactResumeHook,
    FiniteLossHook,
    HeartbeatHook,
    PreemptionHook,
    TrainingPreempted,
)
from .loops import ResumableEpochBasedTrainLoop, ResumableIterBasedTrainLoop
from .resume import find_resumable_checkpoint, restart_count
from .runner import ExactResumeRunner, add_training_guards
from .sampling import SkippingBatchSampler, WorkerRandomState
from .workers import guard_data_worker

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'AtomicLocalBackend',
           'write_atomically', 'FiniteLossHook', 'ClassesCheckHook', 'ExactResumeHook',
           'PreemptionHook', 'HeartbeatHook', 'TrainingPreempted', 'PREEMPTED_EXIT_CODE',
           'STOPPED_EXIT_CODE', 'find_resumable_checkpoint', 'restart_count',
           'SkippingBatchSampler', 'WorkerRandomState', 'guard_data_worker',
           'ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop', 'ExactResumeRunner',
           'add_training_guards',
           'BackboneLayerDecayOptimWrapperConstructor', 'reuse_freed_memory']

_LOADED_ON_USE = {'reuse_freed_memory': 'allocator',
                  'BackboneLayerDecayOptimWrapperConstructor': 'layer_decay'}


def __getattr__(name: str):
    if name in _LOADED_ON_USE:
        return getattr(importlib.import_module(f'.{_LOADED_ON_USE[name]}', __name__), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
