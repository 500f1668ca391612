"""Training-engine pieces for MMEngine runners. Importing it registers them:

* :mod:`.distributed`: the DDP wrapper for distributed training without CUDA;
* :mod:`.fileio`: atomic writes of checkpoints and of the ``last_checkpoint`` pointer;
* :mod:`.resume`: finding the newest checkpoint that can be resumed from;
* :mod:`.hooks`: stopping at the first non-finite loss, exact resumption of random states;
* :mod:`.optim`: layer-wise learning-rate decay for detectors and segmentors.
"""
from . import distributed, fileio, hooks, optim, resume  # noqa: F401  (registrations)
from .distributed import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .fileio import AtomicLocalBackend, write_atomically
from .hooks import FiniteLossHook, RandomStateHook
from .optim import BackboneLayerDecayOptimWrapperConstructor
from .resume import find_resumable_checkpoint

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'AtomicLocalBackend',
           'write_atomically', 'FiniteLossHook', 'RandomStateHook', 'find_resumable_checkpoint',
           'BackboneLayerDecayOptimWrapperConstructor']
