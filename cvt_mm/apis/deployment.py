"""Exporting a config's model, or a part of it, to ONNX and checking the file with ONNX Runtime
(``tools/deployment/export_onnx.py`` is the command line; docs/deployment.md the guide).

:func:`build_part` builds what exports (``backbone``, ``neck``, ``rpn`` or the whole
``model``, as the config's ``data_preprocessor`` hands it images), :func:`export_onnx` writes
it with ``torch.onnx.export(dynamo=True)`` (optionally with symbolic height and width), and
:func:`compare_with_onnxruntime` runs the file beside PyTorch. Needs the ``deploy`` extra.

Example::

    >>> module, info = build_part('configs/mask_rcnn_cvt13_coco.py', 'backbone')
    >>> export_onnx(module, 'cvt13.onnx', (224, 224), dynamic=True)
    >>> compare_with_onnxruntime(module, 'cvt13.onnx', [(224, 224), (281, 169)])
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import os.path as osp
import time
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..compat import HAS_ONNX_DYNAMO_EXPORT, require
from ..models.matrix_resize import matrix_adaptive_avg_pool
from .builders import build_model_from_config, load_config, task_of

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
@contextlib.contextmanager
def exportable_adaptive_pools(module: nn.Module):
    """Within the block, every ``nn.AdaptiveAvgPool2d`` of ``module`` with more than one
    output cell (UperNet's pyramid pooling) computes through
    :func:`~cvt_mm.models.matrix_resize.matrix_adaptive_avg_pool`.

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
            m.forward = functools.partial(matrix_adaptive_avg_pool, output_size=m.output_size)
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
    require(HAS_ONNX_DYNAMO_EXPORT, 'ONNX export (torch.onnx.export(dynamo=True))', '2.5')
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
