"""What tools/train.py and tools/test.py share: turning launcher flags into MMEngine config
and making PyTorch distributed work on CPU-only machines.

MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and defaults to NCCL, and its
DDP wrapper passes ``device_ids=[LOCAL_RANK]``; all three fail without a GPU. On such a machine
we start the same ``torch.distributed`` process group with the gloo backend ourselves (MMEngine
then sees it initialised and skips its own init) and wrap the model in
``cvt_mm.distributed.CPUDistributedDataParallel`` (DDP with ``device_ids=None``, SyncBN reverted
to BN).
"""
import os
import os.path as osp

import torch
import torch.distributed as torch_dist
from mmengine.config import Config, ConfigDict


def set_local_rank_env(local_rank: int) -> None:
    # torch.distributed.launch passes --local-rank; torchrun sets LOCAL_RANK itself.
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(local_rank)


def load_config(args) -> Config:
    """The config with the command line's launcher, --cfg-options and work dir applied
    (default work dir: ./work_dirs/<config name>, as MMDetection's tools)."""
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    return cfg


def prepare_cpu_distributed(cfg, launcher: str) -> None:
    """Set up gloo + CPU DDP when a distributed launcher is used on a machine without CUDA."""
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher != 'pytorch':
        raise ValueError(f'--launcher {launcher} needs GPUs; on a CPU-only machine use '
                         '--launcher pytorch (tools/dist_train.sh) or none')
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or ConfigDict(
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    if wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        wrapper['type'] = 'CPUDistributedDataParallel'
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper


def build_runner(cfg):
    """``Runner.from_cfg`` unless the config names its own ``runner_type``."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
