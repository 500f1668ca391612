"""Whether an exported whole model gives what the model's own ``predict`` gives, on the same
preprocessed images: detections matched one to one (same class, box IoU, score, mask IoU),
class maps compared pixel by pixel, logits by their largest difference.

Example::

    >>> reference = reference_results(model, image)            # model.predict(rescale=False)
    >>> got = graph_results('detection', session.run(None, {'image': image.numpy()}))
    >>> match_detections(reference[0], got[0], score_thr=0.3)['failures']
    []
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

# The bar for "equal to PyTorch" (docs/deployment.md, "The check").
BOX_IOU, SCORE_TOL, MASK_IOU, PIXELS = 0.99, 1e-4, 0.99, 0.999


def reference_results(model: nn.Module, image: Tensor, task: str) -> List[dict]:
    """What the model's own inference gives for a preprocessed batch ``image`` (B, 3, H, W)
    told that it is the whole image (``img_shape`` = ``ori_shape`` = its size, no padding,
    scale 1): per image, ``bboxes``, ``scores``, ``labels`` (and ``masks``) of
    ``model.predict(..., rescale=False)``, or ``seg_map`` (H, W), or ``logits``."""
    h, w = image.shape[-2:]
    meta = dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w), batch_input_shape=(h, w),
                scale_factor=(1.0, 1.0), padding_size=[0, 0, 0, 0])
    with torch.no_grad():
        if task == 'classification':
            return [dict(logits=row.numpy()) for row in model(image, mode='tensor')]
        if task == 'semantic-segmentation':
            from mmseg.structures import SegDataSample
            samples = [SegDataSample(metainfo=meta) for _ in range(len(image))]
            return [dict(seg_map=s.pred_sem_seg.data[0].numpy())
                    for s in model.predict(image, samples)]
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=meta) for _ in range(len(image))]
        out = []
        for s in model.predict(image, samples, rescale=False):
            result = {k: getattr(s.pred_instances, k).numpy()
                      for k in ('bboxes', 'scores', 'labels')}
            if 'masks' in s.pred_instances:
                result['masks'] = s.pred_instances.masks.numpy().astype(bool)
            out.append(result)
        return out


def graph_results(task: str, outputs: Sequence[np.ndarray]) -> List[dict]:
    """The graph's outputs (in :func:`~.models.end2end_output_names` order) per image, in
    :func:`reference_results`' form: a detector's used rows only (label >= 0)."""
    if task == 'classification':
        return [dict(logits=row) for row in outputs[0]]
    if task == 'semantic-segmentation':
        return [dict(seg_map=row[0]) for row in outputs[0]]
    results = []
    for i, (dets, labels) in enumerate(zip(outputs[0], outputs[1])):
        used = labels >= 0
        result = dict(bboxes=dets[used, :4], scores=dets[used, 4], labels=labels[used])
        if len(outputs) > 2:
            result['masks'] = outputs[2][i][used].astype(bool)
        results.append(result)
    return results


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, M) IoU of x1, y1, x2, y2 boxes (float64)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 1.0)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def match_detections(expected: dict, got: dict, score_thr: float, box_iou_min: float = BOX_IOU,
                     score_tol: float = SCORE_TOL, mask_iou_min: float = MASK_IOU) -> dict:
    """Match one image's detections one to one: every expected detection scoring above
    ``score_thr`` needs a found one of its class with box IoU >= ``box_iou_min``, score within
    ``score_tol`` and (with masks) mask IoU >= ``mask_iou_min``; every found detection scoring
    above ``score_thr + score_tol`` must be such a match (nothing extra).

    Returns:
        dict: ``expected``, ``found`` (counts above the threshold), ``matched``,
        ``box_iou``, ``mask_iou`` (the worst over the matches; 1.0 with none), ``score_diff``
        (the largest) and ``failures`` (one line per detection that did not match).
    """
    keep = expected['scores'] > score_thr
    order = np.argsort(-expected['scores'][keep], kind='stable')
    ref = {k: v[keep][order] for k, v in expected.items()}
    ious = box_iou(ref['bboxes'], got['bboxes'])
    used = np.zeros(len(got['scores']), bool)
    stats = dict(expected=int(keep.sum()), found=int((got['scores'] > score_thr).sum()),
                 matched=0, box_iou=1.0, mask_iou=1.0, score_diff=0.0, failures=[])
    for i in range(len(ref['scores'])):
        same = (got['labels'] == ref['labels'][i]) & ~used
        candidates = np.flatnonzero(same)
        described = (f'class {int(ref["labels"][i])} score {ref["scores"][i]:.5f} box '
                     f'{np.round(ref["bboxes"][i], 2).tolist()}')
        if not len(candidates):
            stats['failures'].append(f'{described}: no detection of that class left')
            continue
        j = candidates[np.argmax(ious[i, candidates])]
        diff = abs(float(got['scores'][j]) - float(ref['scores'][i]))
        m_iou = mask_iou(ref['masks'][i], got['masks'][j]) if 'masks' in ref else 1.0
        if ious[i, j] < box_iou_min or diff > score_tol or m_iou < mask_iou_min:
            stats['failures'].append(f'{described}: closest has box IoU {ious[i, j]:.4f}, '
                                     f'score {got["scores"][j]:.5f}, mask IoU {m_iou:.4f}')
            continue
        used[j] = True
        stats['matched'] += 1
        stats['box_iou'] = min(stats['box_iou'], float(ious[i, j]))
        stats['mask_iou'] = min(stats['mask_iou'], m_iou)
        stats['score_diff'] = max(stats['score_diff'], diff)
    for j in np.flatnonzero(~used & (got['scores'] > score_thr + score_tol)):
        stats['failures'].append(f'extra detection: class {int(got["labels"][j])} score '
                                 f'{got["scores"][j]:.5f} box '
                                 f'{np.round(got["bboxes"][j], 2).tolist()}')
    return stats


def compare_results(task: str, expected: List[dict], got: List[dict],
                    score_thr: Optional[float] = None) -> List[dict]:
    """One row per image: a detector's :func:`match_detections`; a segmentor's ``pixels``
    (the fraction of equal pixels); a classifier's ``max_abs`` and ``max_rel`` (the largest
    difference of the logits, and it over the largest logit). Each row has ``ok``."""
    rows = []
    for ref, out in zip(expected, got):
        if task == 'classification':
            max_abs = float(np.abs(out['logits'] - ref['logits']).max())
            scale = float(np.abs(ref['logits']).max()) or 1.0
            rows.append(dict(max_abs=max_abs, max_rel=max_abs / scale,
                             ok=max_abs / scale <= 1e-4))
        elif task == 'semantic-segmentation':
            same = float((out['seg_map'] == ref['seg_map']).mean())
            rows.append(dict(pixels=same, ok=same >= PIXELS and
                             out['seg_map'].shape == ref['seg_map'].shape))
        else:
            stats = match_detections(ref, out, score_thr or 0.0)
            rows.append(dict(stats, ok=not stats['failures']))
    return rows
