"""Training-engine pieces for MMEngine runners, one concern per module. Importing it
registers them. Which module to open for which behaviour: docs/development.md, "The engine".

Exact resume:

* :mod:`.runner`: ``ExactResumeRunner``, the runner our configs name, which adds the
  training guards when it trains, and MMEngine's two training loops made resumable
  mid-epoch without reloading data;
* :mod:`.exact_resume`: every rank's random generators and data position (torchdata's
  ``StatefulDataLoader``) in each checkpoint, and ``ExactResumeHook``, which saves and
  restores them;
* :mod:`.resume`: which checkpoint a run continues from (``--resume``, restarts, requeues).

Hooks (:mod:`.hooks`, one per module): ``PreemptionHook``, ``HeartbeatHook``,
``FiniteLossHook``, ``ClassesCheckHook``; the small collectives they share travel on the
group of :mod:`.flags`.

Launching: :mod:`.launch`, what ``tools/train.py`` and ``tools/test.py`` call (command line to
config, missing datasets named, slurm's environment, a process group restarts cannot hang on,
``--launcher`` on CPUs, building the runner); :mod:`.cpu_ddp`: DDP without CUDA;
:mod:`.workers`: data workers that die with their process (the CPU allocator setting is the
launchers': tools/misc/cpu_malloc.sh).

Beside them: :mod:`.fileio` (atomic checkpoint writes), :mod:`.layer_decay` (layer-wise
learning-rate decay for detectors and segmentors; :mod:`.optim` registers it).

Importing this package registers what configs name by ``type`` and loads no launch module
(``launch``) and no toolbox model zoo: the
tools import those; the name below that lives there is loaded on first use.
"""
import importlib

from . import cpu_ddp, exact_resume, fileio, hooks, optim, runner, workers  # noqa: F401  (registrations)
from .cpu_ddp import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .exact_resume import SkippingBatchSampler, WorkerRandomState
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
from .resume import find_resumable_checkpoint, restart_count
from .runner import (
    ExactResumeRunner,
    ResumableEpochBasedTrainLoop,
    ResumableIterBasedTrainLoop,
    add_training_guards,
)
from .workers import guard_data_worker

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'AtomicLocalBackend',
           'write_atomically', 'FiniteLossHook', 'ClassesCheckHook', 'ExactResumeHook',
           'PreemptionHook', 'HeartbeatHook', 'TrainingPreempted', 'PREEMPTED_EXIT_CODE',
           'STOPPED_EXIT_CODE', 'find_resumable_checkpoint', 'restart_count',
           'SkippingBatchSampler', 'WorkerRandomState', 'guard_data_worker',
           'ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop', 'ExactResumeRunner',
           'add_training_guards',
           'BackboneLayerDecayOptimWrapperConstructor']

_LOADED_ON_USE = {'BackboneLayerDecayOptimWrapperConstructor': 'layer_decay'}


def __getattr__(name: str):
    if name in _LOADED_ON_USE:
        return getattr(importlib.import_module(f'.{_LOADED_ON_USE[name]}', __name__), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
