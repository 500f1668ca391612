"""Distributed training without CUDA: PyTorch's gloo backend and DDP over CPU modules.

MMEngine's launcher and DDP wrapper assume GPUs (NCCL, ``device_ids=[LOCAL_RANK]``), and
PyTorch's ``DistributedDataParallel`` refuses CPU modules that hold ``SyncBatchNorm`` layers
(``SyncBatchNorm layers only work with GPU modules``) -- which every MMSegmentation base config
has. :class:`CPUDistributedDataParallel` is the wrapper ``tools/train.py`` and ``tools/test.py``
select when they are launched distributed on a machine without CUDA; on GPUs nothing changes and
SyncBN stays SyncBN.

:func:`prepare_distributed` makes ``--launcher`` work before the runner is built: slurm's
environment, the process group (:mod:`cvt_mm.engine.process_group`), and this wrapper without
CUDA.

Example (what ``tools/dist_train.sh`` does on a CPU-only machine)::

    import torch.distributed as dist
    dist.init_process_group(backend='gloo')  # before the Runner is built
    cfg.model_wrapper_cfg = dict(type='CPUDistributedDataParallel')
    Runner.from_cfg(cfg).train()
"""
import os
from datetime import timedelta

import torch
import torch.distributed as torch_dist
from mmengine.config import ConfigDict
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.registry import MODEL_WRAPPERS
from torch import nn
from torch.nn.modules.batchnorm import SyncBatchNorm

from .process_group import init_process_group
from .slurm import slurm_environment

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'prepare_distributed']


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


def prepare_distributed(cfg, launcher: str) -> None:
    """Make ``--launcher`` work before the runner is built.

    ``slurm``: the torch.distributed environment is set from slurm's (:func:`slurm_environment`,
    no ``scontrol`` needed). ``pytorch`` (torchrun) and ``slurm``: the process group is started
    here, so that a restarted attempt cannot hang on the failed one's keys
    (:func:`init_process_group`) and rank 0 can share its choice of checkpoint
    (:func:`choose_resume`); MMEngine then skips its own init. Without CUDA (``pytorch`` or
    ``slurm``): the process group uses gloo and the model is wrapped in
    :class:`~cvt_mm.engine.distributed.CPUDistributedDataParallel`.
    """
    if launcher == 'slurm':
        os.environ.update(slurm_environment())
    if launcher == 'none':
        return
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
    timeout = dist_cfg.get('timeout')
    timeout = timedelta(seconds=timeout) if isinstance(timeout, (int, float)) else timeout
    if torch.cuda.is_available():
        if launcher in ('pytorch', 'slurm') and not torch_dist.is_initialized():
            torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', 0)))
            init_process_group(dist_cfg.get('backend', 'nccl'), timeout)
        return
    if launcher not in ('pytorch', 'slurm'):
        raise ValueError(f'--launcher {launcher} needs GPUs; on a CPU-only machine use '
                         '--launcher pytorch (tools/dist_train.sh), slurm or none')
    if not torch_dist.is_initialized():
        init_process_group('gloo', timeout)
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    if wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        wrapper['type'] = 'CPUDistributedDataParallel'
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
