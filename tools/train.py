"""Train a detector, segmentor or classifier from an MMEngine config (MMDetection's flags).

    python tools/train.py configs/mask_rcnn_cvt13_coco.py
    bash tools/dist_train.sh configs/upernet_cvt13_ade20k.py 8

Every run resumes exactly (mid-epoch, every rank), checkpoints and exits with code 75 on
SIGTERM/SIGUSR1, and resumes by itself after a torchrun restart or a slurm requeue
(docs/cluster.md).
"""

import argparse

from mmengine.config import DictAction

import cvt_mm  # registers CvT/CMT; main() calls cvt_mm.setup_process()
from cvt_mm.apis.launch import (
    build_runner,
    config_from_args,
    run_and_finish,
    set_local_rank_env,
    setup_launch,
)


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


def main(argv=None):
    args = parse_args(argv)
    cvt_mm.setup_process()
    cfg = config_from_args(args)

    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'

    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise ValueError(f'--auto-scale-lr: {args.config} has no '
                             'auto_scale_lr=dict(base_batch_size=...); add one to use the flag')
        cfg.auto_scale_lr.enable = True

    setup_launch(cfg, args.config, train=True, resume=args.resume)
    run_and_finish(lambda: build_runner(cfg).train())  # exit code 75 after a preemption


if __name__ == '__main__':
    main()
