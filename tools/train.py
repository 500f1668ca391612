"""Train a detector, segmentor or classifier from an MMEngine config (MMDetection's flags).

    python tools/train.py configs/mask_rcnn_cvt13_coco.py
    bash tools/dist_train.sh configs/upernet_cvt13_ade20k.py 8
"""
import os

# Huge pages for the CPU allocator's large tensors; read once, when torch loads, so set
# before any import. Page faults on fresh 70-280 MB maps cost CMT-S 20-25 % of its CPU
# forward at 800x1333, for +20 % peak RSS (docs/benchmarks.md); THP_MEM_ALLOC_ENABLE=0 opts
# out. No effect on CUDA memory.
os.environ.setdefault('THP_MEM_ALLOC_ENABLE', '1')

import argparse

from mmengine.config import DictAction

import cvt_mm  # noqa: F401  (registers CvT/CMT; MMEngine checkpoints load safely on resume)
from cvt_mm.engine import find_resumable_checkpoint
from cvt_mm.engine.launch import (
    build_runner,
    check_dataset_paths,
    finish_distributed,
    load_config,
    prepare_cpu_distributed,
    set_local_rank_env,
)
from cvt_mm.weights import read_checkpoint


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model from a config')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='where logs and checkpoints go '
                        '(default: ./work_dirs/<config name>)')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision (AmpOptimWrapper, dynamic loss scale)')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the LR by (GPUs x batch per GPU) / '
                        'auto_scale_lr.base_batch_size')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from this checkpoint, or without a value from the latest '
                        'checkpoint in the work dir')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. train_cfg.max_epochs=1')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    set_local_rank_env(args.local_rank)
    return args


def resume_latest(cfg) -> None:
    """``--resume`` without a file: the newest readable checkpoint of the work dir, saying
    which newer files were skipped and why, or plainly that there is none."""
    path, skipped = find_resumable_checkpoint(cfg.work_dir)
    for line in skipped:
        print(f'--resume: {line}', flush=True)
    if path is None:
        print(f'--resume: no checkpoint to resume from in {cfg.work_dir}; training starts at '
              'the beginning', flush=True)
        cfg.resume = False
        cfg.load_from = None
    else:
        print(f'--resume: resuming from {path}', flush=True)
        cfg.resume = True
        cfg.load_from = path


def add_default_hooks(cfg) -> None:
    """Every run stops at the first non-finite loss and resumes exactly (see
    cvt_mm.engine.hooks); a config that lists them already keeps its own settings."""
    hooks = list(cfg.get('custom_hooks') or [])
    present = {hook.get('type') for hook in hooks}
    hooks += [dict(type=name) for name in ('FiniteLossHook', 'RandomStateHook')
              if name not in present]
    cfg.custom_hooks = hooks


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args)

    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'

    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise ValueError(f'--auto-scale-lr: {args.config} has no '
                             'auto_scale_lr=dict(base_batch_size=...); add one to use the flag')
        cfg.auto_scale_lr.enable = True

    if args.resume == 'auto':
        resume_latest(cfg)
    elif args.resume is not None:
        read_checkpoint(args.resume)  # a clear error for a missing or damaged file
        cfg.resume = True
        cfg.load_from = args.resume
    add_default_hooks(cfg)

    # Training validates too (when the config has a val loop).
    check_dataset_paths(cfg, ['train_dataloader']
                        + (['val_dataloader'] if cfg.get('val_cfg') else []), args.config)
    prepare_cpu_distributed(cfg, args.launcher)
    build_runner(cfg).train()
    finish_distributed()


if __name__ == '__main__':
    main()
