"""Training pieces for MMEngine runners, registered on import; which module holds which
behaviour: docs/development.md, "The engine". Layer decay's class (MMPretrain's engine loads
its and MMDetection's model zoos) loads on use; what the tools do around a runner is theirs
(:mod:`cvt_mm.apis.launch`)."""
import importlib

from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

from . import cpu_ddp, exact_resume, fileio, hooks, norm_decay, runner, workers  # noqa: F401,E501
from .cpu_ddp import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .exact_resume import SkippingBatchSampler, WorkerRandomState
from .fileio import AtomicLocalBackend
from .hooks import (
    PREEMPTED_EXIT_CODE,
    STOPPED_EXIT_CODE,
    ClassesCheckHook,
    ExactResumeHook,
    FiniteLossHook,
    PreemptionHook,
    TrainingPreempted,
)
from .norm_decay import NormDecayOptimWrapperConstructor
from .runner import (
    ExactResumeRunner,
    ResumableEpochBasedTrainLoop,
    ResumableIterBasedTrainLoop,
    add_training_guards,
)
from .workers import guard_data_worker

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'AtomicLocalBackend',
           'FiniteLossHook', 'ClassesCheckHook', 'ExactResumeHook', 'PreemptionHook',
           'TrainingPreempted', 'PREEMPTED_EXIT_CODE', 'STOPPED_EXIT_CODE',
           'SkippingBatchSampler', 'WorkerRandomState', 'guard_data_worker',
           'ResumableEpochBasedTrainLoop', 'ResumableIterBasedTrainLoop', 'ExactResumeRunner',
           'add_training_guards', 'BackboneLayerDecayOptimWrapperConstructor',
           'NormDecayOptimWrapperConstructor']


@OPTIM_WRAPPER_CONSTRUCTORS.register_module(name='BackboneLayerDecayOptimWrapperConstructor')
def _build_layer_decay_constructor(optim_wrapper_cfg: dict, paramwise_cfg=None):
    """What ``constructor='BackboneLayerDecayOptimWrapperConstructor'`` builds (a registry
    builds functions as classes), without loading MMPretrain on ``import cvt_mm``."""
    from .layer_decay import BackboneLayerDecayOptimWrapperConstructor
    return BackboneLayerDecayOptimWrapperConstructor(optim_wrapper_cfg, paramwise_cfg)


def __getattr__(name: str):
    if name == 'BackboneLayerDecayOptimWrapperConstructor':
        return getattr(importlib.import_module('.layer_decay', __name__), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
