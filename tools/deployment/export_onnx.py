"""Export a config's model, or a part of it, to ONNX and check the file with ONNX Runtime.

    python tools/deployment/export_onnx.py CONFIG [CHECKPOINT] --shape H W [--dynamic]
        [--part {backbone,neck,rpn,model}] [--out FILE] [--opset N]

Any config of ours (``configs/*.py``) or one inheriting from them. What is exported
(``--part``, default: the most of the model that exports):

* ``backbone``: the backbone's outputs (the feature pyramid, or the logits of a classification
  backbone), for any config;
* ``model``: an MMPretrain classifier's logits ``(B, classes)``, an MMSegmentation segmentor's
  decode-head logits ``(B, classes, H/4, W/4)`` (not yet resized to the image), a one-stage
  detector's raw per-level class scores and box deltas (RetinaNet);
* ``neck`` (detectors): backbone + FPN, the feature levels;
* ``rpn`` (two-stage detectors, default for Mask R-CNN): backbone + FPN + the RPN head's raw
  per-level objectness scores and box deltas, beside the FPN levels.

A two-stage detector's RoI stages (proposals, RoIAlign, box and mask heads) do not export:
see docs/deployment.md.

The graph takes the image as the config's ``data_preprocessor`` hands it to the model:
``float32 (B, 3, H, W)``, channels converted and normalised (mean, std and channel order are
printed and stored in the file's metadata under ``cvt_mm.preprocess``). ``--dynamic``
keeps height and width symbolic (any size from 64 pixels on); the batch size is fixed
(``--batch``).

The file is then run with ONNX Runtime (CPU) on random inputs beside PyTorch: at the export
size and, with ``--dynamic``, at other sizes (``--check-shape``). It prints, per output, the
largest absolute difference and the relative one (largest absolute difference divided by the
largest absolute PyTorch value of that output), and exits with 1 when a relative difference
exceeds ``--rtol``. Without a checkpoint the weights are random, which checks the export, not
accuracy.

Needs the ``deploy`` extra: ``pip install -e .[deploy]`` (onnx, onnxscript, onnxruntime).
"""
from __future__ import annotations

import argparse
import json
import os.path as osp
import sys

import torch
from mmengine.config import DictAction

import cvt_mm  # registers CvT/CMT; main() calls cvt_mm.setup_process()
from cvt_mm.apis.builders import load_config, task_of
from cvt_mm.apis.deployment import (
    DEFAULT_RTOL,
    DEPLOY_EXTRA,
    MIN_DYNAMIC_SIDE,
    MIN_OPSET,
    MIN_STATIC_SIDE,
    PARTS,
    build_part,
    compare_with_onnxruntime,
    default_check_shapes,
    export_onnx,
    output_names,
    parts_of,
    require_deploy_packages,
)


# --------------------------------------------------------------------------- command line
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Export a config\'s model (or its backbone) to ONNX and check it with '
        'ONNX Runtime against PyTorch', epilog=f'Needs the deploy extra: {DEPLOY_EXTRA}')
    parser.add_argument('config', help='config file (configs/*.py or one inheriting them)')
    parser.add_argument('checkpoint', nargs='?',
                        help='checkpoint of the trained model (random weights without it)')
    parser.add_argument('--shape', type=int, nargs='+', required=True, metavar='SIDE',
                        help='input size: H W, or one number for a square')
    parser.add_argument('--dynamic', action='store_true',
                        help=f'dynamic height and width (>= {MIN_DYNAMIC_SIDE}) instead of '
                        'the --shape size alone')
    parser.add_argument('--part', choices=PARTS,
                        help='what to export (default: the most of the model that exports: '
                        'rpn for two-stage detectors, model otherwise)')
    parser.add_argument('--out', help='ONNX file to write (default: '
                        '<config name>_<part>.onnx in the current folder)')
    parser.add_argument('--opset', type=int,
                        help=f'ONNX opset, {MIN_OPSET} or more (default: torch\'s, 20)')
    parser.add_argument('--batch', type=int, default=1, help='batch size (fixed; default 1)')
    parser.add_argument('--check-shape', type=int, nargs=2, action='append', metavar=('H', 'W'),
                        help='with --dynamic: another size to compare at (repeatable; '
                        'default: about 1.25 H x 0.75 W)')
    parser.add_argument('--rtol', type=float, default=DEFAULT_RTOL,
                        help='largest relative difference accepted (default %(default)g)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the random inputs')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. model.backbone.arch=21')
    args = parser.parse_args(argv)

    if not osp.isfile(args.config):
        parser.error(f'config file not found: {args.config}')
    cfg = load_config(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    try:
        allowed = parts_of(cfg)
    except ValueError as e:  # a config of no toolbox we know
        parser.error(str(e))
    if args.part and args.part not in allowed:
        parser.error(f'--part {args.part} does not apply to {cfg.model.type} '
                     f'({task_of(cfg)}); allowed: {", ".join(allowed)}')
    if args.checkpoint and not osp.isfile(args.checkpoint):
        parser.error(f'checkpoint not found: {args.checkpoint}')
    if len(args.shape) == 1:
        args.shape = args.shape * 2
    smallest = MIN_DYNAMIC_SIDE if args.dynamic else MIN_STATIC_SIDE
    if len(args.shape) != 2 or min(args.shape) < smallest:
        parser.error(f'--shape takes H W (or one side), each >= {smallest}'
                     f'{" with --dynamic" if args.dynamic else ""}, got {args.shape}')
    if args.check_shape and not args.dynamic:
        parser.error('--check-shape needs --dynamic: a fixed-size graph runs at --shape only')
    for hw in args.check_shape or []:
        if min(hw) < MIN_DYNAMIC_SIDE:
            parser.error(f'--check-shape sides must be >= {MIN_DYNAMIC_SIDE} (the dynamic '
                         f'range), got {hw[0]} {hw[1]}')
    if args.batch < 1:
        parser.error(f'--batch must be >= 1, got {args.batch}')
    if args.opset is not None:
        try:
            import onnx
            newest = onnx.defs.onnx_opset_version()
        except ImportError:
            newest = None
        if args.opset < MIN_OPSET or (newest and args.opset > newest):
            parser.error(f'--opset {args.opset} is not supported; allowed: {MIN_OPSET}..'
                         f'{newest or "the newest your onnx knows"} (torch\'s exporter '
                         f'implements opset {MIN_OPSET} and later)')
    if not args.rtol > 0:
        parser.error(f'--rtol must be > 0, got {args.rtol}')
    if args.out and not args.out.endswith('.onnx'):
        parser.error(f'--out must name a .onnx file, got {args.out}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    cvt_mm.setup_process()
    require_deploy_packages()
    import onnxruntime

    try:
        module, info = build_part(args.config, args.part, args.checkpoint, args.cfg_options)
    except ValueError as e:
        raise SystemExit(f'error: {e}')
    part = info['part']
    out = args.out or f'{osp.splitext(osp.basename(args.config))[0]}_{part}.onnx'
    h, w = args.shape
    pre = info['preprocess']
    print(f'config:  {args.config} ({info["task"]} {info["model"]}), part: {part}')
    print(f'weights: {info["weights"]}' + ('' if args.checkpoint else
          ': the check below tests the export, not accuracy'))
    print(f'input:   image float32 ({args.batch}, 3, '
          f'{"H, W" if args.dynamic else f"{h}, {w}"}), preprocessed as the config\'s '
          f'data_preprocessor does: {json.dumps(pre) if pre else "nothing"}')

    meta = {'cvt_mm.config': osp.basename(args.config), 'cvt_mm.part': part,
            'cvt_mm.weights': osp.basename(args.checkpoint) if args.checkpoint else 'random',
            'cvt_mm.preprocess': json.dumps(pre)}
    try:
        result = export_onnx(module, out, (h, w), dynamic=args.dynamic, batch=args.batch,
                             opset=args.opset, metadata=meta,
                             names=lambda count: output_names(part, info['task'], count))
    except Exception as e:  # what torch.export / the ONNX translation reports
        print(f'error: export of {part} failed: {type(e).__name__}: {e}', file=sys.stderr)
        return 1
    sizes = f'height and width dynamic (>= {MIN_DYNAMIC_SIDE})' if args.dynamic \
        else f'fixed {h}x{w}'
    print(f'exported: {out} ({result["bytes"] / 2 ** 20:.1f} MiB, opset {result["opset"]}, '
          f'{sizes}) in {result["seconds"]:.1f} s')
    print(f'outputs: {", ".join(result["outputs"])}')

    shapes = [(h, w)]
    if args.dynamic:
        shapes += [tuple(s) for s in (args.check_shape or default_check_shapes((h, w)))]
    rows = compare_with_onnxruntime(module, out, shapes, batch=args.batch, seed=args.seed)
    print(f'\nONNX Runtime {onnxruntime.__version__} (CPU) vs PyTorch {torch.__version__}, '
          f'random inputs (seed {args.seed}); relative = max abs diff / max |PyTorch output|')
    print(f'{"size":>11}  {"output":<10} {"shape":<22} {"max abs diff":>12} '
          f'{"max rel diff":>12}')
    for r in rows:
        print(f'{r["shape"][0]:>5}x{r["shape"][1]:<5}  {r["name"]:<10} '
              f'{str(r["out_shape"]):<22} {r["max_abs"]:>12.3e} {r["max_rel"]:>12.3e}')
    worst_abs = max(r['max_abs'] for r in rows)
    worst = max(rows, key=lambda r: r['max_rel'])
    ok = worst['max_rel'] <= args.rtol
    print(f'largest absolute difference {worst_abs:.3e}, largest relative difference '
          f'{worst["max_rel"]:.3e} ({worst["name"]} at {worst["shape"][0]}x'
          f'{worst["shape"][1]}): {"OK" if ok else "FAILED"} (--rtol {args.rtol:g})')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
