"""Export a config's whole model (or a part of it) to one ONNX graph and check it with ONNX
Runtime against the model's own inference.

    python tools/deployment/export_onnx.py CONFIG [CHECKPOINT] --shape H W [--dynamic]
        [--part {model,backbone,neck,rpn}] [--out FILE] [--opset N] [--score-thr T]

Any config of ours (``configs/*.py``) or one inheriting from them. ``--part model`` (the
default) writes the whole model, from the preprocessed image to the result, with standard
ONNX operators only (``NonMaxSuppression``, ``RoiAlign``, ``TopK``...):

* detectors (Mask R-CNN, Cascade Mask R-CNN, RetinaNet): ``dets`` (B, N, 5: x1, y1, x2, y2,
  score, in the input's pixels), ``labels`` (B, N) int64 and, with a mask head, ``masks``
  (B, N, H, W) bool; N is the test config's ``max_per_img``, unused rows have score 0 and
  label -1 (MMDeploy's end-to-end outputs);
* segmentors (UperNet, Semantic FPN): ``seg_map`` (B, 1, H, W) int64, the class of each pixel
  at the input size;
* classifiers: ``logits`` (B, classes).

A model with a stage the export cannot write (DINO, Mask2Former) stops with an error naming
the stage and why, before anything is written; ``--part backbone`` (any config), ``neck``
(detectors) and ``rpn`` (two-stage detectors: FPN levels and the RPN's raw outputs) export
parts.

The graph takes the image as the config's ``data_preprocessor`` hands it to the model:
``float32 (B, 3, H, W)``, channels converted, normalised and padded. The file's metadata
stores that, the test pipeline's resizing and the class names
(``tools/deployment/onnx_inference.py`` runs the file from them, without torch).
``--dynamic`` keeps height and width symbolic (any size from 64 pixels on); the batch size
is fixed (``--batch``).

The file is then run with ONNX Runtime (CPU) on random images beside PyTorch, at the export
size and, with ``--dynamic``, at other sizes (``--check-shape``): a whole detector's every
detection of ``model.predict(..., rescale=False)`` above ``--score-thr`` must be matched by one
of the graph's (same class, box IoU >= 0.99, score within 1e-4, mask IoU >= 0.99), a
segmentor's class maps agree on >= 99.9 % of pixels, logits and parts within ``--rtol``;
otherwise the tool exits with 1. Without a checkpoint the weights are random, which checks
the export, not accuracy.

Needs the ``deploy`` extra: ``pip install -e .[deploy]`` (onnx, onnxscript, onnxruntime), and
torch >= 2.5 (its ``torch.export``-based exporter; docs/deployment.md says what torch 2.1 gets).
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
    NotExportableError,
    build_part,
    compare_end2end,
    compare_with_onnxruntime,
    default_check_shapes,
    export_onnx,
    output_names,
    parts_of,
    require_deploy_packages,
)
from cvt_mm.compat import has


# --------------------------------------------------------------------------- command line
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Export a config\'s whole model (or a part) to one ONNX graph and check '
        'it with ONNX Runtime against PyTorch', epilog=f'Needs the deploy extra: {DEPLOY_EXTRA}')
    parser.add_argument('config', help='config file (configs/*.py or one inheriting them)')
    parser.add_argument('checkpoint', nargs='?',
                        help='checkpoint of the trained model (random weights without it)')
    parser.add_argument('--shape', type=int, nargs='+', required=True, metavar='SIDE',
                        help='input size: H W, or one number for a square')
    parser.add_argument('--dynamic', action='store_true',
                        help='dynamic height and width instead of the --shape size alone '
                        f'(--shape >= {MIN_DYNAMIC_SIDE}; the graph holds for the sizes '
                        'torch.export finds, printed and stored in the file)')
    parser.add_argument('--part', choices=PARTS,
                        help='what to export (default: model, the whole model from image to '
                        'result)')
    parser.add_argument('--out', help='ONNX file to write (default: '
                        '<config name>_<part>.onnx in the current folder)')
    parser.add_argument('--opset', type=int,
                        help=f'ONNX opset, {MIN_OPSET} or more (default: torch\'s, 20)')
    parser.add_argument('--batch', type=int, default=1, help='batch size (fixed; default 1)')
    parser.add_argument('--check-shape', type=int, nargs=2, action='append', metavar=('H', 'W'),
                        help='with --dynamic: another size to compare at (repeatable; '
                        'default: about 1.25 H x 0.75 W)')
    parser.add_argument('--rtol', type=float, default=DEFAULT_RTOL,
                        help='largest relative difference accepted for logits and parts '
                        '(default %(default)g)')
    parser.add_argument('--score-thr', type=float,
                        help='whole detectors: detections above it must match (default: the '
                        'test config\'s score threshold)')
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
    if args.score_thr is not None and not 0 <= args.score_thr < 1:
        parser.error(f'--score-thr must be in [0, 1), got {args.score_thr}')
    if args.out and not args.out.endswith('.onnx'):
        parser.error(f'--out must name a .onnx file, got {args.out}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not has('onnx_dynamo_export'):
        print(f'error: this export needs torch >= 2.5 (torch.onnx.export(dynamo=True)); this '
              f'is torch {torch.__version__}. On torch 2.1 export with MMDeploy 1.3.1: '
              'docs/deployment.md, "MMDeploy"', file=sys.stderr)
        return 1
    cvt_mm.setup_process()
    require_deploy_packages()
    import onnxruntime
    try:
        module, info = build_part(args.config, args.part, args.checkpoint, args.cfg_options)
    except NotExportableError as e:
        others = [p for p in parts_of(load_config(args.config)) if p != 'model']
        print(f'error: the whole model of {args.config} does not export: {e}. Nothing was '
              f'written; --part {" / ".join(others)} exports a part.', file=sys.stderr)
        return 1
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
    names = info['outputs'] or (lambda count: output_names(part, info['task'], count))
    try:
        result = export_onnx(module, out, (h, w), dynamic=args.dynamic, batch=args.batch,
                             opset=args.opset, metadata=info['metadata'], names=names)
    except Exception as e:  # what torch.export / the ONNX translation reports
        print(f'error: export of {part} failed: {type(e).__name__}: {e}', file=sys.stderr)
        return 1
    ranges = result['sizes']
    sizes = (', '.join(f'{k} {lo} or more' for k, (lo, _) in ranges.items())
             if args.dynamic else f'fixed {h}x{w}')
    print(f'exported: {out} ({result["bytes"] / 2 ** 20:.1f} MiB, opset {result["opset"]}, '
          f'{sizes}) in {result["seconds"]:.1f} s')
    print(f'outputs: {", ".join(result["outputs"])}')

    shapes = [(h, w)]
    if args.dynamic:
        low = (ranges['height'][0], ranges['width'][0])
        if args.check_shape:
            outside = [hw for hw in args.check_shape if hw[0] < low[0] or hw[1] < low[1]]
            if outside:
                print(f'error: --check-shape {outside[0][0]} {outside[0][1]} is below the '
                      f'sizes the graph holds for ({sizes})', file=sys.stderr)
                return 1
        shapes += [(max(a, low[0]), max(b, low[1]))
                   for a, b in (args.check_shape or default_check_shapes((h, w)))]
    header = (f'\nONNX Runtime {onnxruntime.__version__} (CPU) vs PyTorch {torch.__version__}, '
              f'random images (seed {args.seed})')
    if part == 'model':
        rows = compare_end2end(module, out, shapes, batch=args.batch, seed=args.seed,
                               score_thr=args.score_thr)
        ok = print_end2end(header, info['kind'], rows, args.rtol)
    else:
        rows = compare_with_onnxruntime(module, out, shapes, batch=args.batch, seed=args.seed)
        ok = print_parts(header, rows, args.rtol)
    return 0 if ok else 1


def print_end2end(header: str, kind: str, rows, rtol: float) -> bool:
    """The whole model's comparison, one line per image; whether every image agrees."""
    if kind == 'classification':
        print(f'{header}; relative = max abs diff / max |PyTorch logit|')
        for r in rows:
            r['ok'] = r['max_rel'] <= rtol
            print(f'{r["shape"][0]:>5}x{r["shape"][1]:<5} image {r["image"]}: logits max abs '
                  f'diff {r["max_abs"]:.3e}, max rel diff {r["max_rel"]:.3e}')
    elif kind == 'semantic-segmentation':
        print(f'{header}; the class map must agree on >= 99.9 % of pixels')
        for r in rows:
            print(f'{r["shape"][0]:>5}x{r["shape"][1]:<5} image {r["image"]}: '
                  f'{100 * r["pixels"]:.3f} % of pixels equal')
    else:
        print(f'{header}; model.predict(rescale=False) vs the graph, detection by detection '
              '(same class, box IoU >= 0.99, score within 1e-4, mask IoU >= 0.99)')
        for r in rows:
            print(f'{r["shape"][0]:>5}x{r["shape"][1]:<5} image {r["image"]}: PyTorch '
                  f'{r["expected"]}, ONNX Runtime {r["found"]}, matched {r["matched"]}; worst '
                  f'box IoU {r["box_iou"]:.5f}, score diff {r["score_diff"]:.1e}'
                  + (f', mask IoU {r["mask_iou"]:.5f}' if kind == 'instance-segmentation'
                     else ''))
            for failure in r['failures'][:10]:
                print(f'    not matched: {failure}')
    ok = all(r['ok'] for r in rows)
    print('equal to PyTorch: ' + ('OK' if ok else 'FAILED'))
    return ok


def print_parts(header: str, rows, rtol: float) -> bool:
    """A part's per-output differences; whether all are within ``rtol``."""
    print(f'{header}; relative = max abs diff / max |PyTorch output|')
    print(f'{"size":>11}  {"output":<10} {"shape":<22} {"max abs diff":>12} '
          f'{"max rel diff":>12}')
    for r in rows:
        print(f'{r["shape"][0]:>5}x{r["shape"][1]:<5}  {r["name"]:<10} '
              f'{str(r["out_shape"]):<22} {r["max_abs"]:>12.3e} {r["max_rel"]:>12.3e}')
    worst_abs = max(r['max_abs'] for r in rows)
    worst = max(rows, key=lambda r: r['max_rel'])
    ok = worst['max_rel'] <= rtol
    print(f'largest absolute difference {worst_abs:.3e}, largest relative difference '
          f'{worst["max_rel"]:.3e} ({worst["name"]} at {worst["shape"][0]}x'
          f'{worst["shape"][1]}): {"OK" if ok else "FAILED"} (--rtol {rtol:g})')
    return ok


if __name__ == '__main__':
    sys.exit(main())
