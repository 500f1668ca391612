"""``--launcher`` made to work before the runner is built, with or without CUDA.

:func:`prepare_distributed` sets slurm's environment, starts the process group
(:mod:`cvt_mm.engine.process_group`) and, without CUDA, selects gloo and
:class:`~cvt_mm.engine.cpu_ddp.CPUDistributedDataParallel`. Called by ``tools/train.py`` and
``tools/test.py``; ``import cvt_mm`` does not load it.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as torch_dist
from mmengine.config import ConfigDict

from .cpu_ddp import CPUDistributedDataParallel, revert_sync_batchnorm_for_cpu
from .process_group import init_process_group
from .slurm import slurm_environment

__all__ = ['CPUDistributedDataParallel', 'revert_sync_batchnorm_for_cpu', 'prepare_distributed']


def prepare_distributed(cfg, launcher: str) -> None:
    """Make ``--launcher`` work before the runner is built.

    ``slurm``: the torch.distributed environment is set from slurm's (:func:`slurm_environment`,
    no ``scontrol`` needed). ``pytorch`` (torchrun) and ``slurm``: the process group is started
    here, so that a restarted attempt cannot hang on the failed one's keys
    (:func:`init_process_group`) and rank 0 can share its choice of checkpoint
    (:func:`choose_resume`); MMEngine then skips its own init. Without CUDA (``pytorch`` or
    ``slurm``): the process group uses gloo and the model is wrapped in
    :class:`~cvt_mm.engine.cpu_ddp.CPUDistributedDataParallel`.
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
