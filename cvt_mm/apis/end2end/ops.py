"""The detection post-processing of MMDetection 3.x restated for ``torch.export``: fixed-size
tensors throughout, no Python branch on a tensor's value, and operators that ONNX has
(``NonMaxSuppression``, ``RoiAlign``, ``TopK``, ``MatMul``).

Each function names the MMDetection / MMCV code it equals; tests/test_deploy compares them
with it. The one operator of our own, ``cvt_mm::nms_mask``, is a PyTorch custom op whose ONNX
translation (:data:`ONNX_TRANSLATIONS`, handed to ``torch.onnx.export``) is ONNX's
``NonMaxSuppression``: the graph holds no custom ONNX operator.

Rows that hold nothing (fewer detections than ``max_per_img``) are marked by ``valid`` masks
and finally written as score 0, label -1, box and mask zero.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import torch
import torchvision
from torch import Tensor

from ...compat import HAS_ONNX_DYNAMO_EXPORT


class NotExportableError(NotImplementedError):
    """A stage of a model that the whole-model export cannot write; the message names the
    stage and why."""


# The score of a row that holds nothing: below every probability, so ranking puts it last.
INVALID_SCORE = -1.0


def _nms_mask(boxes: Tensor, scores: Tensor, iou_threshold: float, score_threshold: float,
              max_output: int) -> Tensor:
    """Greedy NMS (MMCV's ``nms``, torchvision's, ONNX's ``NonMaxSuppression``: a box is
    dropped when its IoU with a kept higher-scoring box exceeds ``iou_threshold``) over the
    boxes scoring above ``score_threshold``, keeping at most ``max_output``: a bool mask of
    ``scores``' shape."""
    candidates = torch.nonzero(scores > score_threshold).squeeze(1)
    kept = torchvision.ops.nms(boxes[candidates], scores[candidates], iou_threshold)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask[candidates[kept[:max_output]]] = True
    return mask


if HAS_ONNX_DYNAMO_EXPORT:  # torch.library.custom_op (2.4) comes before the exporter (2.5)
    nms_mask = torch.library.custom_op('cvt_mm::nms_mask', mutates_args=())(_nms_mask)

    @nms_mask.register_fake
    def _nms_mask_fake(boxes, scores, iou_threshold, score_threshold, max_output):
        return torch.empty_like(scores, dtype=torch.bool)
else:
    nms_mask = _nms_mask


def _nms_mask_onnx(boxes, scores, iou_threshold: float, score_threshold: float,
                   max_output: int):
    """``cvt_mm::nms_mask`` in ONNX: ``NonMaxSuppression`` (one batch, one class), its
    selected indices scattered into a mask."""
    from onnxscript import opset18 as op
    selected = op.NonMaxSuppression(
        op.Unsqueeze(boxes, [0]), op.Unsqueeze(scores, [0, 1]),
        op.Constant(value_ints=[max_output]), op.Constant(value_floats=[iou_threshold]),
        op.Constant(value_floats=[score_threshold]))
    index = op.Slice(selected, [2], [3], [1])  # (K, 1): the box column
    ones = op.Expand(op.Constant(value_ints=[1]), op.Shape(index, start=0, end=1))
    zeros = op.Mul(op.Cast(scores, to=7), op.Constant(value_ints=[0]))  # int64, scores' shape
    return op.Cast(op.ScatterND(zeros, index, ones), to=9)  # bool


def onnx_translations() -> dict:
    """``custom_translation_table`` for ``torch.onnx.export``: our op -> standard ONNX."""
    return {torch.ops.cvt_mm.nms_mask.default: _nms_mask_onnx}


# --------------------------------------------------------------------------- selection
def top_rows(scores: Tensor, k: int, *rows: Tensor) -> Tuple[Tensor, ...]:
    """The ``k`` highest ``scores`` (1-D) and the matching rows of each of ``rows``, however
    few scores there are: ``k`` rows of ``INVALID_SCORE`` are appended first, so the count
    stays ``k`` (a level with fewer anchors than ``nms_pre``, as MMDetection's
    ``scores.sort()[:nms_pre]`` keeps them all). Returns ``(scores, index, *rows)``; an index
    past the input marks an appended row."""
    pad = scores.new_full((k, ), INVALID_SCORE)
    top, index = torch.cat([scores, pad]).topk(k)
    picked = [torch.cat([r, r.new_zeros((k, ) + r.shape[1:])])[index] for r in rows]
    return (top, index, *picked)


def batched_nms_rows(boxes: Tensor, scores: Tensor, ids: Tensor, valid: Tensor,
                     iou_threshold: float, max_num: int) -> Tuple[Tensor, ...]:
    """MMCV's ``batched_nms(boxes, scores, ids, nms_cfg)[:max_num]`` over the ``valid`` rows
    (NMS within each id: boxes offset by ``id * (max coordinate + 1)``, as MMCV does, so
    rounding matches too), as exactly ``max_num`` rows in descending score.

    Args:
        boxes (Tensor): (K, 4) x1, y1, x2, y2, clipped to the image (>= 0).
        scores (Tensor): (K, ) probabilities.
        ids (Tensor): (K, ) int64 class (or level) of each box.
        valid (Tensor): (K, ) bool: the rows MMDetection would hand to NMS.
        iou_threshold (float): the ``nms`` config's ``iou_threshold``.
        max_num (int): rows returned (``max_per_img``).

    Returns:
        tuple: ``(boxes, scores, ids, kept)`` of the kept rows, highest score first:
        (max_num, 4), (max_num, ), (max_num, ) and (max_num, ) bool, False in the rows past
        the boxes that survive (whose other values are arbitrary).
    """
    if not isinstance(boxes.shape[0], int) or boxes.shape[0] < max_num:
        count = max_num  # symbolic or too few rows: pad to at least max_num
        boxes = torch.cat([boxes, boxes.new_zeros(count, 4)])
        scores = torch.cat([scores, scores.new_zeros(count)])
        ids = torch.cat([ids, ids.new_zeros(count)])
        valid = torch.cat([valid, valid.new_zeros(count)])
    # MMCV: boxes.max() of the boxes it is given, the valid ones (all >= 0 here).
    largest = torch.where(valid[:, None], boxes, torch.zeros_like(boxes)).max()
    offsets = ids.to(boxes.dtype) * (largest + torch.ones_like(largest))
    ranked = torch.where(valid, scores, torch.full_like(scores, INVALID_SCORE))
    keep = nms_mask(boxes + offsets[:, None], ranked, float(iou_threshold),
                    INVALID_SCORE / 2, int(max_num))
    top, index = torch.where(keep, ranked, torch.full_like(ranked, INVALID_SCORE)).topk(max_num)
    return boxes[index], scores[index], ids[index], top > INVALID_SCORE / 2


# --------------------------------------------------------------------------- boxes
def check_box_coder(coder, stage: str) -> None:
    """``NotExportableError`` naming ``stage`` unless ``coder`` is MMDetection's
    ``DeltaXYWHBBoxCoder`` (the coder of every config of ours that exports)."""
    if type(coder).__name__ != 'DeltaXYWHBBoxCoder':
        raise NotExportableError(
            f'{stage}: box coder {type(coder).__name__} has no export-friendly decoding '
            '(supported: DeltaXYWHBBoxCoder)')


def decode_boxes(coder, priors: Tensor, deltas: Tensor, image_shape: Sequence) -> Tensor:
    """``DeltaXYWHBBoxCoder.decode(priors, deltas, max_shape=image_shape)``: MMDetection's
    ``delta2bbox`` itself (its ``decode`` switches to a 2.x module under ONNX export), with
    the clip to the image written as ``torch.clamp`` with tensor bounds, which a graph with
    symbolic sizes takes."""
    from mmdet.models.task_modules.coders.delta_xywh_bbox_coder import delta2bbox
    boxes = delta2bbox(priors, deltas, coder.means, coder.stds, None, 16 / 1000,
                       False, coder.add_ctr_clamp, coder.ctr_clamp)
    if not coder.clip_border:
        return boxes
    h, w = image_shape
    shape = boxes.shape
    boxes = boxes.reshape(-1, 2, 2)
    zero = boxes.new_zeros(())
    high = torch.stack([torch.full_like(zero, w), torch.full_like(zero, h)])  # x, y bounds
    return torch.minimum(torch.maximum(boxes, zero), high).reshape(shape)


def roi_align_levels(extractor, feats: Sequence[Tensor], rois: Tensor) -> Tensor:
    """MMDetection's ``SingleRoIExtractor.forward(feats, rois)`` with fixed sizes: every RoI
    is pooled (torchvision's ``roi_align``, which equals MMCV's ``RoIAlign(aligned=True)``
    and exports as ONNX ``RoiAlign``) on the level ``map_roi_levels`` gives it; on the other
    levels it is a zero-size box (no samples taken where ``sampling_ratio`` is 0), and
    ``where`` keeps its own level's result."""
    layers = extractor.roi_layers
    if len(feats) == 1:
        layer = layers[0]
        return torchvision.ops.roi_align(feats[0], rois, layer.output_size,
                                         layer.spatial_scale, layer.sampling_ratio, True)
    target = extractor.map_roi_levels(rois, len(feats))
    empty = torch.cat([rois[:, :1], rois.new_zeros(rois.shape[0], 4)], 1)
    out = None
    for i, layer in enumerate(layers[:len(feats)]):
        here = (target == i)[:, None]
        # Adaptive sampling (0) of a zero-size box takes no samples: only its own level costs.
        level_rois = torch.where(here, rois, empty) if layer.sampling_ratio == 0 else rois
        pooled = torchvision.ops.roi_align(feats[i], level_rois, layer.output_size,
                                           layer.spatial_scale, layer.sampling_ratio, True)
        out = pooled if out is None else torch.where(here[..., None, None], pooled, out)
    return out


def check_roi_extractor(extractor, stage: str) -> None:
    """``NotExportableError`` naming ``stage`` unless ``extractor`` pools as ``roi_align``
    does: MMDetection's ``SingleRoIExtractor`` over MMCV ``RoIAlign`` layers with
    ``aligned=True`` and average pooling."""
    kind = type(extractor).__name__
    if kind != 'SingleRoIExtractor':
        raise NotExportableError(f'{stage}: RoI extractor {kind} is not supported '
                                  '(supported: SingleRoIExtractor)')
    for layer in extractor.roi_layers:
        if (type(layer).__name__ != 'RoIAlign' or not getattr(layer, 'aligned', False)
                or getattr(layer, 'pool_mode', 'avg') != 'avg'):
            raise NotExportableError(
                f'{stage}: RoI layer {layer!r} is not supported (supported: MMCV RoIAlign '
                'with aligned=True and pool_mode="avg", which ONNX RoiAlign computes)')


# --------------------------------------------------------------------------- masks
def _paste_weights(low: Tensor, high: Tensor, size, cells: int) -> Tensor:
    """(N, size, cells): bilinear weights of ``grid_sample(align_corners=False)`` with zero
    padding that map ``cells`` mask cells spanning [low, high] onto pixel centres, zero
    outside MMDetection's paste window (the box's pixels and one more on each side)."""
    pixel = torch.arange(size, device=low.device).to(low.dtype)
    grid = (pixel[None] + 0.5 - low[:, None]) / (high - low)[:, None] * 2 - 1
    grid = torch.where(torch.isinf(grid), torch.zeros_like(grid), grid)  # as mmdet does
    location = ((grid + 1) * cells - 1) / 2  # unnormalised, as grid_sample
    cell = torch.arange(cells, device=low.device).to(low.dtype)
    weights = (1 - (location[..., None] - cell).abs()).clamp(min=0)
    window = (pixel[None] >= low[:, None].floor() - 1) & (pixel[None] < high[:, None].ceil() + 1)
    return weights * window[..., None].to(weights.dtype)


def paste_masks(masks: Tensor, boxes: Tensor, height, width, threshold: float) -> Tensor:
    """MMDetection's ``_do_paste_mask`` on the CPU (``grid_sample`` of each (M, M) mask
    probability map into its box, bilinear, zero outside, computed in the box's pixels and
    one more on each side) then ``>= threshold``, as two products with per-axis
    interpolation matrices: the same sums without an (N, H, W, 2) grid, and with boxes of
    zero width or height pasted as MMDetection pastes them.

    Args:
        masks (Tensor): (N, M, M) probabilities.
        boxes (Tensor): (N, 4) x1, y1, x2, y2 in pixels, within the image.
        height, width (int): the image's size.
        threshold (float): ``mask_thr_binary``.

    Returns:
        Tensor: (N, height, width) bool.
    """
    x0, y0, x1, y1 = boxes.unbind(1)
    rows = _paste_weights(y0, y1, height, masks.shape[1])
    cols = _paste_weights(x0, x1, width, masks.shape[2])
    return rows @ masks @ cols.transpose(1, 2) >= threshold


def check_nms(cfg, stage: str) -> float:
    """The IoU threshold of a ``test_cfg``'s plain ``nms``; ``NotExportableError`` naming
    ``stage`` for another kind (soft-NMS reweights scores, which ONNX's operator cannot)."""
    nms = cfg.get('nms') or {}
    if nms.get('type', 'nms') != 'nms' or nms.get('class_agnostic', False):
        raise NotExportableError(f'{stage}: NMS {dict(nms)} is not supported (supported: '
                                  "type='nms', per class, as ONNX NonMaxSuppression)")
    return float(nms['iou_threshold'])
