"""MMDetection's detectors from image to result, as ``torch.export`` takes them.

:class:`TwoStageEnd2End` (Mask R-CNN, Cascade Mask R-CNN, Faster R-CNN) and
:class:`OneStageEnd2End` (RetinaNet) run the model's own modules (backbone, neck, heads'
convolutions and fully connected layers, prior generator, ``map_roi_levels``) and restate
what ``model.predict(..., rescale=False)`` does between them with :mod:`cvt_mm.deploy.ops`:
per-level top-k of proposals, box decoding, NMS, RoIAlign, Cascade's refinement, mask
pasting. Outputs are MMDeploy's end-to-end ones: ``dets`` (B, N, 5), ``labels`` (B, N)
int64 and, with a mask head, ``masks`` (B, N, H, W) bool, N = the test config's
``max_per_img``, boxes in the input tensor's pixels (clipped to it, padding included).
Unused rows: score 0, label -1, box and mask zero.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import Tensor, nn

from .ops import (
    INVALID_SCORE,
    NotExportableError,
    batched_nms_rows,
    check_box_coder,
    check_nms,
    check_roi_extractor,
    decode_boxes,
    paste_masks,
    roi_align_levels,
    top_rows,
)


def _require(ok: bool, stage: str, why: str) -> None:
    if not ok:
        raise NotExportableError(f'{stage}: {why}')


def _level_rows(score: Tensor, delta: Tensor, image: int, channels: int) -> Tuple[Tensor, ...]:
    """One image's (H*W*A, channels) scores and (H*W*A, 4) deltas of one level, in MMDetection's
    (H, W, anchor) order."""
    return (score[image].permute(1, 2, 0).reshape(-1, channels),
            delta[image].permute(1, 2, 0).reshape(-1, 4))


def _activate(head, scores: Tensor) -> Tensor:
    """A dense head's class probabilities (sigmoid, or softmax without background)."""
    return scores.sigmoid() if head.use_sigmoid_cls else scores.softmax(-1)[:, :-1]


def _outputs(boxes: Tensor, scores: Tensor, labels: Tensor, kept: Tensor) -> Tuple[Tensor, Tensor]:
    """``dets`` (N, 5) and ``labels`` (N, ) with unused rows zero / -1."""
    dets = torch.cat([boxes, scores[:, None]], 1)
    dets = torch.where(kept[:, None], dets, torch.zeros_like(dets))
    return dets, torch.where(kept, labels, torch.full_like(labels, -1))


def _dense_candidates(head, cfg, scores, anchors, deltas, image_shape) -> Tuple[Tensor, ...]:
    """A dense head's candidates of all levels, decoded: (boxes, scores, valid), valid
    where a row holds a candidate (not padding) larger than ``min_bbox_size``, as
    ``_bbox_post_process`` keeps them."""
    score = torch.cat(scores)
    box = decode_boxes(head.bbox_coder, torch.cat(anchors), torch.cat(deltas), image_shape)
    ok = score > INVALID_SCORE / 2
    if cfg.get('min_bbox_size', -1) >= 0:
        ok = ok & (box[:, 2] - box[:, 0] > cfg.min_bbox_size) & \
            (box[:, 3] - box[:, 1] > cfg.min_bbox_size)
    return box, score, ok


# --------------------------------------------------------------------------- RPN
def check_rpn(head) -> None:
    stage = f'RPN ({type(head).__name__})'
    _require(type(head).__name__ == 'RPNHead', stage, 'only RPNHead is supported')
    check_box_coder(head.bbox_coder, stage)
    check_nms(head.test_cfg, stage)


def rpn_proposals(head, feats: Sequence[Tensor], image_shape) -> Tuple[Tensor, Tensor]:
    """``RPNHead.predict(feats, ..., rescale=False)``: (B, max_per_img, 4) proposals and
    (B, max_per_img) bool, False for rows beyond the proposals NMS kept."""
    cfg = head.test_cfg
    cls_scores, bbox_preds = head(feats)
    priors = head.prior_generator.grid_priors([c.shape[-2:] for c in cls_scores],
                                              dtype=feats[0].dtype, device=feats[0].device)
    nms_pre, max_num = cfg.get('nms_pre', -1), cfg.max_per_img
    iou = check_nms(cfg, 'RPN')
    boxes, valid = [], []
    for b in range(feats[0].shape[0]):
        scores, deltas, anchors, levels = [], [], [], []
        for level, (cls, reg, prior) in enumerate(zip(cls_scores, bbox_preds, priors)):
            score, delta = _level_rows(cls, reg, b, head.cls_out_channels)
            score = _activate(head, score).reshape(-1)
            if nms_pre > 0:  # top nms_pre, or all of a smaller level
                score, _, delta, prior = top_rows(score, nms_pre, delta, prior)
            scores.append(score), deltas.append(delta), anchors.append(prior)
            levels.append(torch.full_like(score, level, dtype=torch.long))
        box, score, ok = _dense_candidates(head, cfg, scores, anchors, deltas, image_shape)
        box, _, _, kept = batched_nms_rows(box, score, torch.cat(levels), ok, iou, max_num)
        boxes.append(box), valid.append(kept)
    return torch.stack(boxes), torch.stack(valid)


# --------------------------------------------------------------------------- RoI heads
def _rois(boxes: Tensor) -> Tensor:
    """(B, N, 4) -> MMDetection's (B*N, 5) RoIs: batch index, x1, y1, x2, y2."""
    index = torch.arange(boxes.shape[0], device=boxes.device).to(boxes.dtype)
    index = index[:, None, None].expand(boxes.shape[0], boxes.shape[1], 1)
    return torch.cat([index, boxes], 2).reshape(-1, 5)


def check_bbox_head(head, stage: str) -> None:
    _require(not getattr(head, 'custom_cls_channels', False)
             and not getattr(head, 'custom_activation', False), stage,
             f'{type(head.loss_cls).__name__} changes the class activation; supported: softmax')
    _require(getattr(head, 'with_reg', True), stage, 'a box head without regression')
    check_box_coder(head.bbox_coder, stage)


def rcnn_detections(head, cfg, rois: Tensor, cls_score: Tensor, bbox_pred: Tensor,
                    proposal_ok: Tensor, image_shape) -> Tuple[Tensor, ...]:
    """``BBoxHead._predict_by_feat_single`` (softmax, decode per class, ``multiclass_nms``)
    for one image's RoIs: boxes (N, 4), scores (N, ), labels (N, ), kept (N, )."""
    scores = cls_score.softmax(-1)
    rows, classes = rois.shape[0], head.num_classes
    per_roi = 1 if head.reg_class_agnostic else classes
    priors = rois[:, 1:].repeat_interleave(per_roi, dim=0)
    boxes = decode_boxes(head.bbox_coder, priors, bbox_pred.reshape(-1, 4), image_shape)
    boxes = boxes.reshape(rows, per_roi, 4).expand(rows, classes, 4)
    scores = scores[:, :-1]
    labels = torch.arange(classes, device=scores.device)[None].expand(rows, classes)
    ok = (scores > cfg.score_thr) & proposal_ok[:, None]
    return batched_nms_rows(boxes.reshape(-1, 4), scores.reshape(-1), labels.reshape(-1),
                            ok.reshape(-1), check_nms(cfg, 'R-CNN'), cfg.max_per_img)


class TwoStageEnd2End(nn.Module):
    """A two-stage MMDetection detector (``StandardRoIHead`` or ``CascadeRoIHead`` under an
    ``RPNHead``), image in, ``dets``, ``labels`` (and ``masks``) out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        check_rpn(model.rpn_head)
        roi = model.roi_head
        kind = type(roi).__name__
        _require(kind in ('StandardRoIHead', 'CascadeRoIHead'), f'RoI head ({kind})',
                 'supported: StandardRoIHead, CascadeRoIHead')
        self.cascade = kind == 'CascadeRoIHead'
        stages = roi.num_stages if self.cascade else 1
        extractors = list(roi.bbox_roi_extractor) if self.cascade else [roi.bbox_roi_extractor]
        heads = list(roi.bbox_head) if self.cascade else [roi.bbox_head]
        for i in range(stages):
            check_roi_extractor(extractors[i], f'box RoI extractor of stage {i}')
            check_bbox_head(heads[i], f'box head of stage {i} ({type(heads[i]).__name__})')
        _require(not getattr(roi, 'with_shared_head', False), 'RoI head',
                 'a shared head (ResNet C4 detectors) is not supported')
        check_nms(roi.test_cfg, 'R-CNN')
        self.with_mask = bool(getattr(roi, 'with_mask', False))
        if self.with_mask:
            _require(not getattr(roi, 'share_roi_extractor', False), 'mask head',
                     'share_roi_extractor=True is not supported')
            masks = roi.mask_roi_extractor
            for i, extractor in enumerate(masks if self.cascade else [masks]):
                check_roi_extractor(extractor, f'mask RoI extractor of stage {i}')
        self.model = model

    def _stage(self, i: int, name: str):
        roi = self.model.roi_head
        module = getattr(roi, name)
        return module[i] if self.cascade else module

    def forward(self, image: Tensor) -> Tuple[Tensor, ...]:
        model, roi = self.model, self.model.roi_head
        shape = image.shape[-2:]
        feats = model.extract_feat(image)
        proposals, proposal_ok = rpn_proposals(model.rpn_head, feats, shape)
        batch, count = proposals.shape[:2]
        rois = _rois(proposals)
        stages = roi.num_stages if self.cascade else 1
        logits = []
        for i in range(stages):
            extractor = self._stage(i, 'bbox_roi_extractor')
            head = self._stage(i, 'bbox_head')
            cls_score, bbox_pred = head(roi_align_levels(
                extractor, feats[:extractor.num_inputs], rois))
            logits.append(cls_score)
            if i < stages - 1:  # CascadeRoIHead._refine_roi: regress_by_class
                label = cls_score[:, :-1].argmax(dim=1)
                if not head.reg_class_agnostic:
                    index = torch.stack([label * 4 + j for j in range(4)], 1)
                    bbox_pred = torch.gather(bbox_pred, 1, index)
                refined = decode_boxes(head.bbox_coder, rois[:, 1:], bbox_pred, shape)
                rois = torch.cat([rois[:, :1], refined], 1)
        cls_score = sum(logits) / float(len(logits))  # the stages' mean, as mmdet
        head = self._stage(stages - 1, 'bbox_head')
        results = [rcnn_detections(
            head, roi.test_cfg, rois.view(batch, count, 5)[b],
            cls_score.view(batch, count, -1)[b], bbox_pred.view(batch, count, -1)[b],
            proposal_ok[b], shape) for b in range(batch)]
        boxes, scores, labels, kept = (torch.stack(r) for r in zip(*results))
        dets, labels_out = zip(*[_outputs(*r) for r in results])
        outputs = [torch.stack(dets), torch.stack(labels_out)]
        if self.with_mask:
            outputs.append(self._masks(feats, boxes, labels, kept, shape))
        return tuple(outputs)

    def _masks(self, feats, boxes: Tensor, labels: Tensor, kept: Tensor, shape) -> Tensor:
        """``predict_mask``: the mask head(s) on the detections, the label's channel, mean
        of the stages' sigmoids (Cascade), pasted at the input size."""
        roi = self.model.roi_head
        batch, count = boxes.shape[:2]
        rois = _rois(boxes)
        label = labels.reshape(-1)
        probabilities: List[Tensor] = []
        for i in range(roi.num_stages if self.cascade else 1):
            extractor = self._stage(i, 'mask_roi_extractor')
            head = self._stage(i, 'mask_head')
            preds = head(roi_align_levels(extractor, feats[:extractor.num_inputs], rois))
            probabilities.append(preds.sigmoid())
        masks = torch.cat([p[None] for p in probabilities]).mean(dim=0)
        if not head.class_agnostic:
            masks = masks[torch.arange(label.shape[0], device=label.device), label]
        else:
            masks = masks[:, 0]
        pasted = paste_masks(masks, boxes.reshape(-1, 4), shape[0], shape[1],
                             roi.test_cfg.mask_thr_binary)
        return (pasted & kept.reshape(-1)[:, None, None]).view(batch, count, *shape)


# --------------------------------------------------------------------------- one stage
class OneStageEnd2End(nn.Module):
    """A one-stage anchor-based MMDetection detector (RetinaNet: ``BaseDenseHead``'s
    ``_predict_by_feat_single`` without score factors), image in, ``dets``, ``labels`` out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        head = model.bbox_head
        stage = f'dense head ({type(head).__name__})'
        _require(type(head).__name__ in ('RetinaHead', 'AnchorHead'), stage,
                 'supported: RetinaHead (anchor-based, no score factors)')
        check_box_coder(head.bbox_coder, stage)
        check_nms(head.test_cfg, stage)
        self.model = model

    def forward(self, image: Tensor) -> Tuple[Tensor, Tensor]:
        model = self.model
        head, cfg = model.bbox_head, model.bbox_head.test_cfg
        shape = image.shape[-2:]
        feats = model.extract_feat(image)
        cls_scores, bbox_preds = head(feats)
        priors = head.prior_generator.grid_priors([c.shape[-2:] for c in cls_scores],
                                                  dtype=feats[0].dtype, device=feats[0].device)
        nms_pre, threshold = cfg.get('nms_pre', -1), cfg.get('score_thr', 0)
        iou = check_nms(cfg, 'dense head')
        dets, labels = [], []
        for b in range(image.shape[0]):
            scores, deltas, anchors, classes = [], [], [], []
            for cls, reg, prior in zip(cls_scores, bbox_preds, priors):
                score, delta = _level_rows(cls, reg, b, head.cls_out_channels)
                score = _activate(head, score)
                count, width = score.shape
                # filter_scores_and_topk: above score_thr, then the top nms_pre (anchor, class)
                flat = score.reshape(-1)
                flat = torch.where(flat > threshold, flat, torch.full_like(flat, INVALID_SCORE))
                if nms_pre > 0:
                    flat, index = top_rows(flat, nms_pre)[:2]
                    index = index.clamp(max=count * width - 1)  # past the end: invalid rows
                else:
                    index = torch.arange(flat.shape[0], device=flat.device)
                anchor = torch.div(index, width, rounding_mode='floor')
                scores.append(flat), classes.append(index % width)
                deltas.append(delta[anchor]), anchors.append(prior[anchor])
            box, score, ok = _dense_candidates(head, cfg, scores, anchors, deltas, shape)
            rows = batched_nms_rows(box, score, torch.cat(classes), ok, iou, cfg.max_per_img)
            det, label = _outputs(*rows)
            dets.append(det), labels.append(label)
        return torch.stack(dets), torch.stack(labels)
