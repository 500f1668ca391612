"""Exporting a config's model, or a part of it, to ONNX and checking the file with ONNX Runtime
(``tools/deployment/export_onnx.py`` is the command line; docs/deployment.md the guide).

:func:`build_part` builds what exports: the whole ``model`` from the preprocessed image to
the result (:mod:`cvt_mm.apis.end2end`: detections and masks, the class map, logits), or a
part (``backbone``, ``neck``, ``rpn``) as the config's ``data_preprocessor`` hands it
images. :func:`export_onnx` writes it with ``torch.onnx.export(dynamo=True)`` (optionally
with symbolic height and width) and standard ONNX operators only;
:func:`compare_end2end` runs a whole model's file beside the model's own ``predict``,
:func:`compare_with_onnxruntime` a part's beside PyTorch. Needs the ``deploy`` extra.

Example::

    >>> module, info = build_part('configs/mask_rcnn_cvt13_coco.py', 'model', 'model.pth')
    >>> export_onnx(module, 'mask_rcnn.onnx', (800, 1344), dynamic=True,
    ...             names=info['outputs'], metadata=info['metadata'])
    >>> rows = compare_end2end(module, 'mask_rcnn.onnx', [(800, 1344), (1001, 1009)])
    >>> all(r['ok'] for r in rows)
    True
"""
from __future__ import annotations

import json
import logging
import os
import os.path as osp
import time
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..compat import HAS_ONNX_DYNAMO_EXPORT, require
from .builders import build_model_from_config, load_config, task_of
from .end2end.graph import (
    check_dynamic_range,
    exportable,
    fixed_size_resizes,
    input_sizes,
    lowest_ir_version,
    non_standard_ops,
)
from .end2end.metadata import file_metadata, preprocess_info
from .end2end.models import (
    NotExportableError,
    end2end_module,
    end2end_output_names,
    max_detections,
    task_name,
    unsupported_reason,
)

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
    """A part of a model as a graph: image in, a flat tuple of tensors out."""

    def __init__(self, model: nn.Module, part: str):
        super().__init__()
        self.model, self.part = model, part

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        model = self.model
        if self.part == 'backbone':
            return _flat(model.backbone(image))
        feats = model.extract_feat(image)
        if self.part == 'neck':
            return _flat(feats)
        return _flat((feats, model.rpn_head(feats)))


def parts_of(cfg) -> Tuple[str, ...]:
    """The parts of a config's model that export, the default (the whole model) first."""
    if task_of(cfg) == 'mmdet':
        if cfg.model.get('rpn_head') is not None:
            return ('model', 'rpn', 'neck', 'backbone')
        if cfg.model.get('neck') is not None:
            return ('model', 'neck', 'backbone')
    return ('model', 'backbone')


def output_names(part: str, task: str, count: int) -> List[str]:
    """Names of a part's outputs, in order: ``feat{i}`` (backbone), ``fpn{i}`` (neck),
    ``fpn{i}``, ``rpn_cls{i}``, ``rpn_reg{i}`` (rpn). The whole model's are
    :func:`~cvt_mm.apis.end2end.models.end2end_output_names`."""
    if part == 'backbone':
        return [f'feat{i}' for i in range(count)]
    if part == 'neck':
        return [f'fpn{i}' for i in range(count)]
    if part == 'rpn':
        levels = count // 3
        return ([f'fpn{i}' for i in range(levels)] + [f'rpn_cls{i}' for i in range(levels)]
                + [f'rpn_reg{i}' for i in range(levels)])
    return [f'output{i}' for i in range(count)]


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
        tuple: ``(module, info)``: the eval-mode module (image in, its outputs out) and a
        dict with ``task`` (the toolbox), ``kind`` (what the outputs are:
        ``instance-segmentation``, ``detection``, ``semantic-segmentation``,
        ``classification``, or ``features`` for a part), ``model`` (class name), ``part``,
        ``weights``, ``preprocess``, ``outputs`` (the whole model's output names, None for a
        part: :func:`output_names` then) and ``metadata`` (the file's, see
        :mod:`cvt_mm.apis.end2end.metadata`).

    Raises:
        NotExportableError: ``part='model'`` of a model with a stage the export cannot write,
            naming it and why (nothing is written).
        ValueError: a part the model lacks, or a config whose dataset and head disagree on
            the number of classes.

    Example::

        >>> module, info = build_part('configs/upernet_cvt13_ade20k.py')
        >>> info['outputs'], module(torch.randn(1, 3, 64, 64)).shape
        (['seg_map'], torch.Size([1, 1, 64, 64]))
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
    if part == 'model' and unsupported_reason(cfg):
        raise NotExportableError(unsupported_reason(cfg))
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
    score_thr, outputs = None, None
    if part == 'model':
        module = end2end_module(model)
        kind, outputs = task_name(module), end2end_output_names(module)
        if kind in ('detection', 'instance-segmentation'):
            score_thr = max_detections(module)[1]
    else:
        module, kind = _Part(model, part).eval(), 'features'
    name = osp.basename(config) if isinstance(config, str) else 'config'
    weights = osp.basename(checkpoint) if checkpoint else 'random'
    info = dict(task=task, kind=kind, model=type(model).__name__, part=part,
                weights=checkpoint or 'random (no checkpoint given)',
                preprocess=preprocess_info(model), outputs=outputs,
                metadata=file_metadata(cfg, model, kind, name, part, weights, score_thr))
    return module, info


# --------------------------------------------------------------------------- export
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
    from .end2end.ops import onnx_translations
    size = sum(p.numel() * p.element_size() for p in module.parameters())
    start = time.perf_counter()
    # torch.export first, ourselves: torch.onnx.export would retry a failed dynamic capture
    # another way and could return a graph of the example's size alone.
    with torch.no_grad(), exportable(module):
        auto = torch.export.Dim.AUTO
        exported = torch.export.export(
            module, (example, ), strict=False,
            dynamic_shapes=({2: auto, 3: auto}, ) if dynamic else None)
    sizes = input_sizes(exported, (h, w)) if dynamic else dict(height=[h, h], width=[w, w])
    if dynamic:
        check_dynamic_range(sizes, (h, w))
        fixed = fixed_size_resizes(exported)
        if fixed:
            raise ValueError('with --dynamic these resizes would keep the example\'s size '
                             f'at every size: {"; ".join(fixed)}. Nothing was written; '
                             'export without --dynamic, at the size you run')
    with torch.no_grad():
        program = torch.onnx.export(
            exported, (example, ), dynamo=True, input_names=['image'], output_names=names,
            opset_version=opset, verbose=False, external_data=size > PROTOBUF_LIMIT,
            custom_translation_table=onnx_translations())
    lowest_ir_version(program.model)
    custom = non_standard_ops(program.model)
    if custom:
        raise RuntimeError(f'the graph holds operators outside the ONNX standard: '
                           f'{", ".join(custom)}; nothing was written')
    metadata = dict(metadata or {}, **{'cvt_mm.input_size': json.dumps(sizes)})
    program.model.metadata_props.update({k: str(v) for k, v in metadata.items()})
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    try:
        program.save(path, external_data=size > PROTOBUF_LIMIT)
    except BaseException:  # no partial file left behind
        for leftover in (path, path + '.data'):
            if osp.exists(leftover):
                os.remove(leftover)
        raise
    seconds = time.perf_counter() - start
    opset_used = program.model.opset_imports.get('', opset)
    return dict(seconds=seconds, bytes=osp.getsize(path), opset=opset_used, outputs=names,
                sizes=sizes)


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


def compare_end2end(module: nn.Module, path: str, shapes: Sequence[Sequence[int]],
                    batch: int = 1, seed: int = 0, score_thr: Optional[float] = None,
                    threads: Optional[int] = None) -> List[dict]:
    """Run a whole model's ONNX file with ONNX Runtime (CPU) and the model's own inference
    (``model.predict(..., rescale=False)``, or the logits) on the same random images, one
    batch per size in ``shapes``, and compare them (:mod:`cvt_mm.apis.end2end.compare`).

    Args:
        module (nn.Module): what :func:`build_part` returned for ``part='model'``.
        path (str): the ``.onnx`` file.
        shapes (Sequence[Sequence[int]]): ``(H, W)`` sizes to run at.
        batch (int): images per run. Defaults to 1.
        seed (int): the images depend on it alone. Defaults to 0.
        score_thr (float, optional): detections above it must match; the test config's
            score threshold when None.
        threads (int, optional): ONNX Runtime's intra-op threads; its default when None.

    Returns:
        list[dict]: one per image: ``shape``, ``image`` (index in the batch), ``ok`` and the
        comparison's numbers (detectors: ``expected``, ``found``, ``matched``, ``box_iou``,
        ``score_diff``, ``mask_iou``, ``failures``; segmentors: ``pixels``; classifiers:
        ``max_abs``, ``max_rel``).
    """
    import onnxruntime as ort

    from .end2end.compare import compare_results, graph_results, reference_results
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    task = task_name(module)
    if score_thr is None and task in ('detection', 'instance-segmentation'):
        score_thr = max_detections(module)[1]
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for h, w in shapes:
        image = torch.randn(batch, 3, h, w, generator=gen)
        expected = reference_results(module.model, image, task)
        got = graph_results(task, session.run(None, {session.get_inputs()[0].name:
                                                     image.numpy()}))
        for i, row in enumerate(compare_results(task, expected, got, score_thr)):
            rows.append(dict(row, shape=(h, w), image=i))
    return rows
