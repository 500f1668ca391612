"""From ``tools/train.py``'s and ``tools/test.py``'s command line to MMEngine config."""
import os
import os.path as osp

from mmengine.config import Config

__all__ = ['set_local_rank_env', 'config_from_args']


def set_local_rank_env(local_rank: int) -> None:
    # torch.distributed.launch passes --local-rank; torchrun sets LOCAL_RANK itself.
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(local_rank)


def config_from_args(args) -> Config:
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
