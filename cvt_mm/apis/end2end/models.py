"""A config's whole model as one module from the preprocessed image to the result, for
``torch.export``: :func:`end2end_module` picks the wrapper and refuses, naming the stage and
why, a model whose post-processing it cannot write.

======================================  ===================================================
model                                   outputs
======================================  ===================================================
two-stage detector (Mask R-CNN,         ``dets`` (B, N, 5) float32: x1, y1, x2, y2, score in
Cascade Mask R-CNN, Faster R-CNN)       the input's pixels; ``labels`` (B, N) int64;
                                        ``masks`` (B, N, H, W) bool with a mask head
one-stage detector (RetinaNet)          ``dets``, ``labels``
segmentor (UperNet, Semantic FPN)       ``seg_map`` (B, 1, H, W) int64: the class of each pixel
classifier (MMPretrain)                 ``logits`` (B, classes)
======================================  ===================================================

N is the test config's ``max_per_img``; rows past the detections have score 0, label -1
and an empty mask. Example::

    >>> module = end2end_module(model)        # a built, eval-mode model
    >>> dets, labels, masks = module(image)   # image: (1, 3, H, W), preprocessed
"""
from __future__ import annotations

from typing import List, Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from .detectors import NotExportableError, OneStageEnd2End, TwoStageEnd2End

# Where the deformable-attention models stop (measured with torch 2.13, MMDetection 3.3,
# MMCV 2.1; docs/deployment.md, "What does not export"): both build a tensor of the feature
# maps' sizes and read the sizes back from it, which torch.export cannot trace.
_DEFORMABLE = ('{model}: {stage} builds the feature maps\' sizes as a tensor '
               '(torch._shape_as_tensor: "data is not allocated yet" under torch.export), and '
               'past that {reader} reads the sizes back from that tensor (data-dependent '
               'shapes); the whole model does not export')
UNSUPPORTED = {
    'DINO': _DEFORMABLE.format(
        model='DINO', stage='DeformableDETR.pre_transformer',
        reader="the encoder's reference points (torch.linspace over each level's H, W)"),
    'Mask2Former': _DEFORMABLE.format(
        model='Mask2Former', stage="the pixel decoder (MSDeformAttnPixelDecoder.forward)",
        reader="MMCV's MultiScaleDeformableAttention (an assert on the sizes' product)"),
}


def unsupported_reason(cfg) -> str:
    """Why a config's whole model does not export, read from the config alone ('' when
    nothing known stops it): saves building a large model only to refuse it."""
    model = cfg.get('model') or {}
    head = (model.get('decode_head') or {}).get('type', '')
    if model.get('type') in UNSUPPORTED:
        return UNSUPPORTED[model['type']]
    if isinstance(head, str) and 'Mask2Former' in head:
        return UNSUPPORTED['Mask2Former']
    return ''


def _task_kind(model: nn.Module) -> str:
    module = type(model).__module__
    for scope in ('mmdet', 'mmseg', 'mmpretrain'):
        if module.startswith(scope + '.'):
            return scope
    return 'mmpretrain' if hasattr(model, 'head') else 'unknown'


class SegmentorEnd2End(nn.Module):
    """MMSegmentation's ``EncoderDecoder.predict`` in ``whole`` mode: the decode head's
    logits resized (bilinear, its ``align_corners``) to the input size, then the class of each
    pixel (``argmax``; ``sigmoid > threshold`` for a one-channel head): (B, 1, H, W) int64."""

    def __init__(self, model: nn.Module):
        super().__init__()
        head = model.decode_head
        if 'Mask2Former' in type(head).__name__:
            raise NotExportableError(UNSUPPORTED['Mask2Former'])
        mode = (model.test_cfg or {}).get('mode', 'whole')
        if mode != 'whole':
            raise NotExportableError(f'segmentor test_cfg.mode={mode!r}: sliding-window '
                                     'inference is not supported; supported: mode="whole"')
        self.model = model

    def forward(self, image: Tensor) -> Tensor:
        head = self.model.decode_head
        logits = head(self.model.extract_feat(image))
        logits = F.interpolate(logits, size=image.shape[-2:], mode='bilinear',
                               align_corners=head.align_corners)
        if logits.shape[1] == 1:
            return (logits.sigmoid() > head.threshold).long()
        return logits.argmax(dim=1, keepdim=True)


class ClassifierEnd2End(nn.Module):
    """MMPretrain's classifier: the head's ``logits`` (B, classes), before softmax."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, image: Tensor) -> Tensor:
        return self.model(image, mode='tensor')


def end2end_module(model: nn.Module) -> nn.Module:
    """The module that exports ``model`` (built from one of our configs, eval mode) whole.

    Raises:
        NotExportableError: naming the stage that cannot export and why (raised before any
            tracing, so no file is written).
    """
    name = type(model).__name__
    if name in UNSUPPORTED:
        raise NotExportableError(UNSUPPORTED[name])
    scope = _task_kind(model)
    if scope == 'mmdet':
        if getattr(model, 'rpn_head', None) is not None and hasattr(model, 'roi_head'):
            return TwoStageEnd2End(model).eval()
        if hasattr(model, 'bbox_head') and hasattr(model, 'neck'):
            return OneStageEnd2End(model).eval()
    elif scope == 'mmseg' and hasattr(model, 'decode_head'):
        return SegmentorEnd2End(model).eval()
    elif scope == 'mmpretrain':
        return ClassifierEnd2End(model).eval()
    raise NotExportableError(f'{name}: no whole-model export for this kind of model; '
                             'supported: two-stage and RetinaNet detectors, EncoderDecoder '
                             'segmentors, classifiers')


def end2end_output_names(module: nn.Module) -> List[str]:
    """The graph's output names, in order, for a module of :func:`end2end_module`."""
    if isinstance(module, TwoStageEnd2End):
        return ['dets', 'labels'] + (['masks'] if module.with_mask else [])
    if isinstance(module, OneStageEnd2End):
        return ['dets', 'labels']
    if isinstance(module, SegmentorEnd2End):
        return ['seg_map']
    return ['logits']


def task_name(module: nn.Module) -> str:
    """``instance-segmentation``, ``detection``, ``semantic-segmentation`` or
    ``classification``: what the graph's outputs are (stored in the file's metadata)."""
    names = end2end_output_names(module)
    if 'masks' in names:
        return 'instance-segmentation'
    if 'dets' in names:
        return 'detection'
    return 'semantic-segmentation' if names == ['seg_map'] else 'classification'


def max_detections(module: nn.Module) -> Tuple[int, float]:
    """A detector module's ``(max_per_img, score_thr)`` of its final test config."""
    model = module.model
    cfg = model.roi_head.test_cfg if isinstance(module, TwoStageEnd2End) \
        else model.bbox_head.test_cfg
    return int(cfg.max_per_img), float(cfg.get('score_thr', 0.0))

