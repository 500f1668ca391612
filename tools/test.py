"""Evaluate a checkpoint on a config's test set (detection, segmentation or classification).

    python tools/test.py configs/mask_rcnn_cvt13_coco.py work_dirs/.../epoch_12.pth \
        --show-dir vis --out results.pkl
"""

import argparse
import os.path as osp

from mmengine.config import ConfigDict, DictAction

import cvt_mm  # registers CvT/CMT; main() calls cvt_mm.setup_process()
from cvt_mm.apis.launch import (
    build_runner,
    config_from_args,
    run_and_finish,
    set_local_rank_env,
    setup_launch,
)
from cvt_mm.checkpoint import checkpoint_misfit


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test (and evaluate) a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file, or an http(s):// URL '
                        '(downloaded once into the torch hub cache; docs/checkpoints.md)')
    parser.add_argument('--work-dir', help='where the evaluation metrics and logs go')
    parser.add_argument('--out', help='dump the raw predictions to this .pkl file')
    parser.add_argument('--show', action='store_true', help='show prediction pictures')
    parser.add_argument('--show-dir', help='write prediction pictures into this directory '
                        '(relative paths are taken from the current directory)')
    parser.add_argument('--wait-time', type=float, default=2, help='seconds per --show picture')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. test_dataloader.batch_size=4')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--tta', action='store_true',
                        help='test-time augmentation (the config must define tta_model and '
                        'tta_pipeline)')
    parser.add_argument('--allow-partial', action='store_true',
                        help='evaluate even if the checkpoint lacks some of the model\'s '
                        'parameters or has others of another shape (they stay random)')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    set_local_rank_env(args.local_rank)
    return args


def enable_visualization(cfg, show: bool, show_dir, wait_time: float) -> None:
    """Switch on the config's visualization hook; each toolbox's hook names its output
    folder differently, so dispatch on the hook type."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise ValueError('--show/--show-dir: the config has no default_hooks.visualization '
                         '(DetVisualizationHook, SegVisualizationHook or VisualizationHook)')
    show_dir = osp.abspath(show_dir) if show_dir else None
    hook_type = hook['type'].split('.')[-1]
    hook.update(show=show, wait_time=wait_time)
    if hook_type == 'DetVisualizationHook':
        hook['draw'] = True
        if show_dir:
            hook['test_out_dir'] = show_dir
    elif hook_type == 'SegVisualizationHook':
        # mmseg's hook draws only every `interval`-th test image (default 50); draw them all,
        # as MMDetection's hook does in testing.
        hook.update(draw=True, interval=1)
        if show_dir:
            # mmseg's hook writes through the visualizer's storage backend.
            cfg.visualizer['save_dir'] = show_dir
    elif hook_type == 'VisualizationHook':  # mmpretrain
        hook.update(enable=True, interval=1)
        if show_dir:
            hook['out_dir'] = show_dir
    else:
        raise ValueError(f'--show/--show-dir: unsupported visualization hook {hook_type}; '
                         'known: DetVisualizationHook, SegVisualizationHook, VisualizationHook')


def enable_tta(cfg) -> None:
    missing = [key for key in ('tta_model', 'tta_pipeline') if key not in cfg]
    if missing:
        raise ValueError(f'--tta: the config lacks {" and ".join(missing)}; define them as in '
                         "the toolbox's own TTA configs")
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    dataset = cfg.test_dataloader.dataset
    while 'dataset' in dataset:  # wrappers such as ConcatDataset / RepeatDataset
        dataset = dataset['dataset']
    dataset.pipeline = cfg.tta_pipeline


def results_dumper(cfg, out: str):
    if not out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out must end with .pkl or .pickle, got {out}')
    if cfg.get('default_scope') == 'mmdet':
        # mmdet's dumper RLE-encodes masks, which keeps the file small.
        from mmdet.evaluation import DumpDetResults
        return DumpDetResults(out_file_path=out)
    from mmengine.evaluator import DumpResults
    return DumpResults(out_file_path=out)


def evaluate(cfg, checkpoint: str, out=None, allow_partial: bool = False) -> None:
    """Build the runner, check that ``checkpoint`` fits its model, test. The runner lives only
    in this call: its DDP wrapper holds the process group (see run_and_finish)."""
    runner = build_runner(cfg)
    model = runner.model.module if hasattr(runner.model, 'module') else runner.model
    misfit = checkpoint_misfit(model, checkpoint)
    if misfit and not allow_partial:
        raise SystemExit(f'error: {misfit}\nNothing was evaluated; --allow-partial evaluates '
                         'it anyway (the parts not in the checkpoint stay random).')
    if out:
        runner.test_evaluator.metrics.append(results_dumper(cfg, out))
    runner.test()


def main(argv=None):
    args = parse_args(argv)
    cvt_mm.setup_process()
    cfg = config_from_args(args)
    cfg.load_from = args.checkpoint

    if args.show or args.show_dir:
        enable_visualization(cfg, args.show, args.show_dir, args.wait_time)
    if args.tta:
        enable_tta(cfg)

    setup_launch(cfg, args.config, train=False)
    run_and_finish(lambda: evaluate(cfg, args.checkpoint, args.out, args.allow_partial))


if __name__ == '__main__':
    main()
