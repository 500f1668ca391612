"""What tools/train.py and tools/test.py share: turning launcher flags into MMEngine config
and making PyTorch distributed work on CPU-only machines.

MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and defaults to NCCL, and its
DDP wrapper passes ``device_ids=[LOCAL_RANK]``; all three fail without a GPU. On such a machine
we start the same ``torch.distributed`` process group with the gloo backend ourselves (MMEngine
then sees it initialised and skips its own init) and wrap the model in
``cvt_mm.engine.distributed.CPUDistributedDataParallel`` (DDP with ``device_ids=None``,
SyncBN reverted to BN).
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


# Where the README describes each dataset the configs name, and its expected layout.
DATASET_LAYOUTS = {
    'CocoDataset': ('COCO 2017 in MMDetection\'s layout',
                    ['data/coco/annotations/instances_{train,val}2017.json',
                     'data/coco/{train,val}2017/*.jpg'],
                    'README.md, "Detection (Mask R-CNN, COCO) and segmentation" > "Data"'),
    'ADE20KDataset': ('ADE20K (ADEChallengeData2016) in MMSegmentation\'s layout',
                      ['data/ade/ADEChallengeData2016/images/{training,validation}/*.jpg',
                       'data/ade/ADEChallengeData2016/annotations/{training,validation}/*.png'],
                      'README.md, "Detection (Mask R-CNN, COCO) and segmentation" > "Data"'),
    'ImageNet': ('ImageNet-1k in MMPretrain\'s layout',
                 ['data/imagenet/{train,val}/ (class folders, or with meta/{train,val}.txt)'],
                 'README.md, "ImageNet pretraining (MMPretrain)" > "Data"'),
}


def _dataset_paths(dataset) -> list:
    """(dataset type, [paths it reads]) of a dataset config, through wrappers."""
    while 'dataset' in dataset:  # RepeatDataset, ClassBalancedDataset, ...
        dataset = dataset['dataset']
    if 'datasets' in dataset:  # ConcatDataset
        return [p for d in dataset['datasets'] for p in _dataset_paths(d)]
    root = dataset.get('data_root') or ''
    if '://' in str(root):
        return []  # a remote backend: nothing to check on this disk
    paths = []
    if dataset.get('ann_file'):
        paths.append(osp.join(root, dataset['ann_file']))
    prefix = dataset.get('data_prefix') or {}
    for value in (prefix.values() if isinstance(prefix, dict) else [prefix]):
        if value:
            paths.append(osp.join(root, value))
    if not paths and dataset.get('split'):  # MMPretrain's ImageNet: data_root/<split>/
        paths.append(osp.join(root, dataset['split']))
    if not paths and root:
        paths.append(root)
    return [(dataset.get('type', '?'), p) for p in paths]


def check_dataset_paths(cfg, dataloaders, config_path: str) -> None:
    """Stop with one message, before anything is built, when the data the config reads is
    not on disk: which paths are missing, the layout the README describes, and how to point
    the config elsewhere. Remote data roots (``s3://``...) are not checked."""
    missing, types = [], []
    for name in dataloaders:
        loader = cfg.get(name)
        if not loader or 'dataset' not in loader:
            continue
        for dataset_type, path in _dataset_paths(loader['dataset']):
            types.append(dataset_type)
            if not osp.exists(path):
                missing.append(f'  {name}: {path}')
    if not missing:
        return
    lines = [f'error: the data of {config_path} is not where the config looks for it '
             f'(relative paths are taken from {osp.abspath(".")}):', *missing]
    for dataset_type in dict.fromkeys(types):
        if dataset_type in DATASET_LAYOUTS:
            what, layout, where = DATASET_LAYOUTS[dataset_type]
            lines += [f'Expected: {what}:', *(f'    {p}' for p in layout),
                      f'  Getting it: {where}.']
    roots = ' '.join(f'{name}.dataset.data_root=/path/to/data/' for name in dataloaders
                     if cfg.get(name))
    lines += ['Point the config at your copy: add --cfg-options ' + roots
              + (' (and val_evaluator.ann_file / test_evaluator.ann_file for COCO)'
                 if 'CocoDataset' in types else '')
              + f", or write a config of your own with _base_ = '{config_path}' that sets them."]
    raise SystemExit('\n'.join(lines))


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


def finish_distributed() -> None:
    """Wait for every process, then tear the process group down before the interpreter exits.
    Left to interpreter shutdown, gloo's threads are sometimes destroyed while still joinable
    and the process aborts ("terminate called without an active exception", exit -6) after
    a run that finished."""
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.barrier()
        torch_dist.destroy_process_group()


def build_runner(cfg):
    """``Runner.from_cfg`` unless the config names its own ``runner_type``."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
