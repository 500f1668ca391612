"""DDP over CPU modules (gloo): MMEngine's DDP wrapper assumes GPUs (``device_ids``), and
PyTorch's refuses CPU modules holding ``SyncBatchNorm`` layers, which every MMSegmentation base
config has. :func:`cvt_mm.apis.launch.prepare_distributed` selects
:class:`CPUDistributedDataParallel` for a distributed launch without CUDA.
"""
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.registry import MODEL_WRAPPERS
from torch import nn
from torch.nn.modules.batchnorm import SyncBatchNorm

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu']


def revert_sync_batchnorm_for_cpu(module: nn.Module) -> nn.Module:
    """``module`` with every SyncBN layer (torch's or mmcv's) a plain BatchNorm of the same
    parameters and statistics, and one log line saying how many there were."""
    try:  # mmcv's own SyncBN ('MMSyncBN') is converted too, when mmcv has its ops
        from mmcv.ops import SyncBatchNorm as MMCVSyncBatchNorm
        sync_types = (SyncBatchNorm, MMCVSyncBatchNorm)
    except ImportError:
        sync_types = (SyncBatchNorm, )
    count = sum(isinstance(m, sync_types) for m in module.modules())
    if count == 0:
        return module
    print_log(f'Distributed training without CUDA: {count} SyncBN layers converted to '
              'BatchNorm (gloo cannot synchronise them; each process normalises its own '
              'batch). On GPUs they stay SyncBN.', logger='current')
    return revert_sync_batchnorm(module)


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for CPU modules: SyncBN layers become BatchNorm
    (:func:`revert_sync_batchnorm_for_cpu`) and ``device_ids`` is None, as PyTorch requires.

    Args:
        module (nn.Module): the model to wrap, on the CPU.
        **kwargs: ``DistributedDataParallel`` options; ``device_ids`` is ignored.
    """

    def __init__(self, module: nn.Module, **kwargs):
        kwargs['device_ids'] = None
        super().__init__(module=revert_sync_batchnorm_for_cpu(module), **kwargs)
