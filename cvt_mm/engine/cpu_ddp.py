"""DDP over CPU modules: PyTorch's gloo backend and MMEngine's wrapper without CUDA.

MMEngine's DDP wrapper assumes GPUs (``device_ids=[LOCAL_RANK]``), and PyTorch's
``DistributedDataParallel`` refuses CPU modules that hold ``SyncBatchNorm`` layers
(``SyncBatchNorm layers only work with GPU modules``) -- which every MMSegmentation base config
has. :class:`CPUDistributedDataParallel` is the wrapper ``tools/train.py`` and ``tools/test.py``
select when they are launched distributed on a machine without CUDA
(:func:`cvt_mm.engine.launch.prepare_distributed`); on GPUs nothing changes and SyncBN
stays SyncBN. Registered on ``import cvt_mm``, so a config that names it builds anywhere.

Example (what ``tools/dist_train.sh`` does on a CPU-only machine)::

    import torch.distributed as dist
    dist.init_process_group(backend='gloo')  # before the Runner is built
    cfg.model_wrapper_cfg = dict(type='CPUDistributedDataParallel')
    Runner.from_cfg(cfg).train()
"""
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.registry import MODEL_WRAPPERS
from torch import nn
from torch.nn.modules.batchnorm import SyncBatchNorm

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu']


def revert_sync_batchnorm_for_cpu(module: nn.Module) -> nn.Module:
    """Replace every SyncBN layer by a plain BatchNorm (same parameters and statistics) and
    say how many there were in one log line; a model without SyncBN is returned as it is.

    Args:
        module (nn.Module): the model, on the CPU.

    Returns:
        nn.Module: the model with per-process BatchNorm layers.
    """
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
    """MMEngine's ``MMDistributedDataParallel`` for CPU modules (gloo).

    SyncBN layers become BatchNorm (see :func:`revert_sync_batchnorm_for_cpu`) and DDP gets
    ``device_ids=None``, as PyTorch requires for CPU modules. All other keyword arguments
    (``broadcast_buffers``, ``find_unused_parameters``, ...) go to DDP unchanged.

    Args:
        module (nn.Module): the model to wrap, on the CPU.
        **kwargs: ``DistributedDataParallel`` options; ``device_ids`` is ignored.
    """

    def __init__(self, module: nn.Module, **kwargs):
        kwargs['device_ids'] = None
        super().__init__(module=revert_sync_batchnorm_for_cpu(module), **kwargs)
