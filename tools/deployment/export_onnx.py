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
import contextlib
import functools
import json
import logging
import os
import os.path as osp
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.config import DictAction
from torch import nn

import cvt_mm  # noqa: F401  (registers CvT/CMT; lets MMEngine checkpoints load safely)
from cvt_mm.testing import build_model_from_config, load_config, task_of

PARTS = ('backbone', 'neck', 'rpn', 'model')
# Smallest height/width of a dynamic graph. torch.export specialises sizes that reach a
# single token (CvT's stride-32 key map below 35 pixels, CMT's stride-32 stage at 32), so the
# symbolic range starts above them, with room for the heads' pooling.
MIN_DYNAMIC_SIDE = 64
# Smallest side of a fixed-size export: what the backbones accept (stride-32 maps of 1x1).
MIN_STATIC_SIDE = 32
# The opset torch's exporter implements its operators in; lower ones need a conversion.
MIN_OPSET = 18
# ONNX's protobuf limit: above it the weights go to a `.data` file beside the model.
PROTOBUF_LIMIT = 2 ** 31 - 2 ** 24
DEPLOY_EXTRA = 'pip install -e .[deploy]   # onnx, onnxscript, onnxruntime'
DEFAULT_RTOL = 1e-4


def require_deploy_packages() -> None:
    """``SystemExit`` naming the install line when the ``deploy`` extra is missing."""
    missing = []
    for name in ('onnx', 'onnxscript', 'onnxruntime'):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise SystemExit(f'error: ONNX export needs {", ".join(missing)}, which are not '
                         f'installed; install the deploy extra:\n    {DEPLOY_EXTRA}')


# --------------------------------------------------------------------------- parts
def _flat(outputs) -> Tuple[torch.Tensor, ...]:
    """Nested tuples/lists of tensors (heads return per-level lists) as one flat tuple."""
    if isinstance(outputs, torch.Tensor):
        return (outputs, )
    return tuple(t for item in outputs for t in _flat(item))


class _Part(nn.Module):
    """The exported graph: image in, a flat tuple of tensors out."""

    def __init__(self, model: nn.Module, part: str):
        super().__init__()
        self.model, self.part = model, part

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        model = self.model
        if self.part == 'backbone':
            return _flat(model.backbone(image))
        if self.part == 'neck':
            return _flat(model.extract_feat(image))
        if self.part == 'rpn':
            feats = model.extract_feat(image)
            return _flat((feats, model.rpn_head(feats)))
        return _flat(model(image, mode='tensor'))


def parts_of(cfg) -> Tuple[str, ...]:
    """The parts of a config's model that export, the default first."""
    if task_of(cfg) == 'mmdet':
        if cfg.model.get('rpn_head') is not None:
            return ('rpn', 'neck', 'backbone')
        if cfg.model.get('neck') is not None:
            # One-stage detectors: mode='tensor' is the head's raw per-level outputs.
            return ('model', 'neck', 'backbone')
    return ('model', 'backbone')


def output_names(part: str, task: str, count: int) -> List[str]:
    """Names of the graph's outputs, in order: ``feat{i}`` (backbone), ``fpn{i}`` (neck),
    ``fpn{i}``, ``rpn_cls{i}``, ``rpn_reg{i}`` (rpn), ``logits`` (classifier),
    ``seg_logits`` (segmentor), ``cls{i}``, ``reg{i}`` (one-stage detector heads)."""
    if part == 'backbone':
        return [f'feat{i}' for i in range(count)]
    if part == 'neck':
        return [f'fpn{i}' for i in range(count)]
    if part == 'rpn':
        levels = count // 3
        return ([f'fpn{i}' for i in range(levels)] + [f'rpn_cls{i}' for i in range(levels)]
                + [f'rpn_reg{i}' for i in range(levels)])
    if task == 'mmpretrain' and count == 1:
        return ['logits']
    if task == 'mmseg' and count == 1:
        return ['seg_logits']
    if task == 'mmdet' and count % 2 == 0:
        levels = count // 2
        return [f'cls{i}' for i in range(levels)] + [f'reg{i}' for i in range(levels)]
    return [f'output{i}' for i in range(count)]


def preprocess_info(model: nn.Module) -> dict:
    """What the config's ``data_preprocessor`` does before the graph: mean, std (RGB/BGR
    order of the converted image), channel conversion and the padding divisor."""
    pre = getattr(model, 'data_preprocessor', None)
    info = {}
    if pre is None:
        return info
    if getattr(pre, '_enable_normalize', False):
        info['mean'] = [round(float(v), 4) for v in pre.mean.flatten()]
        info['std'] = [round(float(v), 4) for v in pre.std.flatten()]
    # The flag that swaps the channels of the loaded (BGR) image before normalising:
    # MMEngine's (MMDetection's), MMSegmentation's and MMPretrain's names for it.
    flags = ('_channel_conversion', 'channel_conversion', 'to_rgb')
    info['bgr_to_rgb'] = any(bool(getattr(pre, f, False)) for f in flags)
    divisor = getattr(pre, 'pad_size_divisor', None) or getattr(pre, 'size_divisor', None)
    if divisor and int(divisor) > 1:
        info['pad_size_divisor'] = int(divisor)
    return info


def load_weights(model: nn.Module, path: str) -> None:
    """Load a checkpoint of the whole model (``state_dict`` of an MMEngine checkpoint, or a
    plain state dict); ``SystemExit`` naming what does not fit."""
    from mmengine.runner import CheckpointLoader
    if not osp.isfile(path):
        raise SystemExit(f'error: checkpoint not found: {path}')
    ckpt = CheckpointLoader.load_checkpoint(path, map_location='cpu')
    sd = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(sd, dict):
        raise SystemExit(f'error: {path} holds no state dict (got {type(ckpt).__name__})')
    sd = {k[len('module.'):] if k.startswith('module.') else k: v for k, v in sd.items()}
    try:
        missing, _ = model.load_state_dict(sd, strict=False)
    except RuntimeError as e:  # shapes that differ
        raise SystemExit(f'error: {path} does not fit the config\'s model (another arch or '
                         f'number of classes?):\n{e}')
    missing = [k for k in missing if not k.endswith('num_batches_tracked')]
    if missing:
        shown = ', '.join(missing[:5]) + (', ...' if len(missing) > 5 else '')
        raise SystemExit(f'error: {path} does not fit the config\'s model: {len(missing)} '
                         f'parameters and buffers are not in it ({shown}). A backbone-only '
                         'file belongs in the config\'s init_cfg; export a trained model\'s '
                         'checkpoint.')


def build_part(config, part: Optional[str] = None, checkpoint: Optional[str] = None,
               cfg_options: Optional[dict] = None) -> Tuple[nn.Module, dict]:
    """The module to export and what describes it.

    Args:
        config (str | Config): a config file of ours (or one inheriting from them).
        part (str, optional): ``'backbone'``, ``'neck'``, ``'rpn'`` or ``'model'``; by
            default the largest part of this kind of model that exports (see the module doc).
        checkpoint (str, optional): a trained model's checkpoint; random weights without it.
        cfg_options (dict, optional): config entries to override (``--cfg-options``).

    Returns:
        tuple: ``(module, info)``: the eval-mode module (image in, flat tuple of tensors out)
        and a dict with ``task``, ``model`` (class name), ``part``, ``weights`` and
        ``preprocess``.

    Example::

        >>> module, info = build_part('configs/upernet_cvt13_ade20k.py', 'model')
        >>> [t.shape for t in module(torch.randn(1, 3, 64, 64))]
        [torch.Size([1, 150, 16, 16])]
    """
    cfg = load_config(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    task = task_of(cfg)
    allowed = parts_of(cfg)
    part = part or allowed[0]
    if part not in allowed:
        raise ValueError(f'--part {part} does not apply to {cfg.model.type} ({task}); '
                         f'allowed: {", ".join(allowed)}')
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # init_weights logs every parameter at INFO
    try:
        model = build_model_from_config(cfg)
    finally:
        logger.setLevel(level)
    if checkpoint:
        load_weights(model, checkpoint)
    model.eval()
    info = dict(task=task, model=type(model).__name__, part=part,
                weights=checkpoint or 'random (no checkpoint given)',
                preprocess=preprocess_info(model))
    return _Part(model, part).eval(), info


# --------------------------------------------------------------------------- export
def _pool_matrix(size, bins: int, like: torch.Tensor) -> torch.Tensor:
    """``(bins, size)`` averaging weights of adaptive pooling along one axis: bin ``o``
    averages ``[floor(o * size / bins), ceil((o + 1) * size / bins))``, as PyTorch's
    adaptive pooling. Built from tensor ops, so ``size`` may be symbolic."""
    index = torch.arange(size, device=like.device)
    o = torch.arange(bins, device=like.device)
    start = (o * size) // bins
    end = ((o + 1) * size + bins - 1) // bins
    inside = (index[None] >= start[:, None]) & (index[None] < end[:, None])
    return inside.to(like.dtype) / (end - start).to(like.dtype)[:, None]


def _adaptive_avg_pool(x: torch.Tensor, output_size) -> torch.Tensor:
    """``F.adaptive_avg_pool2d`` as two products with averaging matrices."""
    out_h, out_w = output_size if isinstance(output_size, (tuple, list)) \
        else (output_size, output_size)
    out_h = x.shape[-2] if out_h is None else out_h
    out_w = x.shape[-1] if out_w is None else out_w
    rows = _pool_matrix(x.shape[-2], out_h, x)
    cols = _pool_matrix(x.shape[-1], out_w, x)
    return torch.matmul(torch.matmul(rows, x), cols.transpose(0, 1))


@contextlib.contextmanager
def exportable_adaptive_pools(module: nn.Module):
    """Within the block, every ``nn.AdaptiveAvgPool2d`` of ``module`` with more than one
    output cell (UperNet's pyramid pooling) computes through :func:`_adaptive_avg_pool`.

    torch's exporter writes such a pool as an ``AveragePool`` whose kernel and stride are
    fixed from the example input, so a dynamic graph silently averages the wrong windows at
    any other size (1.8 absolute error on random data); the matrices are built from the
    input's size in the graph. One output cell (a global pool) exports correctly and is left
    alone. Outside the block the modules are PyTorch's again, which the comparison with
    ONNX Runtime then checks this against.
    """
    patched = []
    for m in module.modules():
        if isinstance(m, nn.AdaptiveAvgPool2d) and m.output_size not in (1, (1, 1)):
            m.forward = functools.partial(_adaptive_avg_pool, output_size=m.output_size)
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


def export_onnx(module: nn.Module, path: str, shape: Sequence[int], dynamic: bool = False,
                batch: int = 1, opset: Optional[int] = None,
                names: Union[Sequence[str], Callable[[int], List[str]], None] = None,
                metadata: Optional[dict] = None) -> dict:
    """Export ``module`` with ``torch.onnx.export(dynamo=True)`` to ``path``.

    Args:
        module (nn.Module): image in, tensor(s) out, in eval mode.
        path (str): the ``.onnx`` file to write (its folder is created).
        shape (Sequence[int]): ``(H, W)`` of the example input.
        dynamic (bool): keep height and width symbolic (>= ``MIN_DYNAMIC_SIDE``).
            Defaults to False.
        batch (int): the (fixed) batch size. Defaults to 1.
        opset (int, optional): ONNX opset; torch's default (20) when None.
        names (Sequence[str] | Callable, optional): output names, or a function of the
            number of outputs that gives them; ``output{i}`` when None.
        metadata (dict, optional): ``str -> str`` entries for the model's metadata.

    Returns:
        dict: ``seconds`` (export time), ``bytes`` (file size), ``opset``, ``outputs`` (names).

    Example::

        >>> from cvt_mm.models.cmt import CMT
        >>> info = export_onnx(CMT(arch='ti', num_classes=0).eval(), 'cmt_ti.onnx',
        ...                    (64, 96), dynamic=True)
    """
    h, w = shape
    example = torch.randn(batch, 3, h, w)
    with torch.no_grad():
        count = len(_flat(module(example)))
    if callable(names):
        names = names(count)
    names = list(names) if names else [f'output{i}' for i in range(count)]
    if len(names) != count:
        raise ValueError(f'{len(names)} output names for {count} outputs')
    dynamic_shapes = None
    if dynamic:
        dims = {2: torch.export.Dim('height', min=MIN_DYNAMIC_SIDE),
                3: torch.export.Dim('width', min=MIN_DYNAMIC_SIDE)}
        dynamic_shapes = (dims, )  # by position: any module's first argument
    size = sum(p.numel() * p.element_size() for p in module.parameters())
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    start = time.perf_counter()
    with torch.no_grad(), exportable_adaptive_pools(module):
        program = torch.onnx.export(
            module, (example, ), dynamo=True, input_names=['image'], output_names=names,
            dynamic_shapes=dynamic_shapes, opset_version=opset, verbose=False,
            external_data=size > PROTOBUF_LIMIT)
    if metadata:
        program.model.metadata_props.update({k: str(v) for k, v in metadata.items()})
    program.save(path, external_data=size > PROTOBUF_LIMIT)
    seconds = time.perf_counter() - start
    opset_used = program.model.opset_imports.get('', opset)
    return dict(seconds=seconds, bytes=osp.getsize(path), opset=opset_used, outputs=names)


def compare_with_onnxruntime(module: nn.Module, path: str, shapes: Sequence[Sequence[int]],
                             batch: int = 1, seed: int = 0,
                             threads: Optional[int] = None) -> List[dict]:
    """Run the ONNX file with ONNX Runtime (CPU) and ``module`` with PyTorch on the same
    random images, one per size in ``shapes``.

    Args:
        module (nn.Module): what was exported (eval mode).
        path (str): the ``.onnx`` file.
        shapes (Sequence[Sequence[int]]): ``(H, W)`` sizes to run at.
        batch (int): images per run. Defaults to 1.
        seed (int): the images depend on it alone. Defaults to 0.
        threads (int, optional): ONNX Runtime's intra-op threads; its default when None.

    Returns:
        list[dict]: one per size and output: ``shape`` (H, W), ``name``, ``out_shape``,
        ``max_abs`` (largest ``|onnx - torch|``) and ``max_rel`` (``max_abs`` divided by the
        largest ``|torch|`` of that output).

    Example::

        >>> rows = compare_with_onnxruntime(module, 'cmt_ti.onnx', [(64, 96), (83, 77)])
        >>> max(r['max_rel'] for r in rows) < 1e-4
        True
    """
    import numpy as np
    import onnxruntime as ort
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    input_name = session.get_inputs()[0].name
    names = [o.name for o in session.get_outputs()]
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for h, w in shapes:
        image = torch.randn(batch, 3, h, w, generator=gen)
        with torch.no_grad():
            expected = [t.float().numpy() for t in _flat(module(image))]
        got = session.run(None, {input_name: image.numpy()})
        if len(got) != len(expected):
            raise RuntimeError(f'{path} gives {len(got)} outputs, PyTorch {len(expected)}')
        for name, ref, out in zip(names, expected, got):
            if ref.shape != out.shape:
                raise RuntimeError(f'output {name} at {h}x{w}: ONNX Runtime gives shape '
                                   f'{out.shape}, PyTorch {ref.shape}')
            max_abs = float(np.abs(out - ref).max()) if ref.size else 0.0
            scale = float(np.abs(ref).max()) if ref.size else 0.0
            rows.append(dict(shape=(h, w), name=name, out_shape=tuple(ref.shape),
                             max_abs=max_abs, max_rel=max_abs / scale if scale else max_abs))
    return rows


def default_check_shapes(shape: Sequence[int]) -> List[Tuple[int, int]]:
    """The extra size a dynamic export is checked at: about 1.25 x H by 0.75 x W, odd, so
    it is neither the export size nor a multiple of 32 (every padding path runs)."""
    h, w = shape
    return [((h * 5 // 4) | 1, max(MIN_DYNAMIC_SIDE + 1, (w * 3 // 4) | 1))]


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
