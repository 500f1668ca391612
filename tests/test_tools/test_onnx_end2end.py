"""Whole models as one ONNX graph (cvt_mm.apis.end2end, docs/deployment.md).

The restated post-processing against MMDetection's and MMCV's own code, on random inputs
built to reach every branch (boxes past the image, zero-size boxes, fewer survivors than
rows, RoIs of every pyramid level); then a Cascade Mask R-CNN on CMT-Ti (one block a stage)
and a narrow CvT RetinaNet, exported whole with dynamic size and compared with their own
``predict`` at the export size and another, detection by detection. Mask R-CNN and Semantic
FPN are compared trained (tests/test_tools/test_onnx_trained.py), the classifier and UperNet
through the tool (test_onnx_export.py).
"""
import importlib.util
import os.path as osp

import numpy as np
import pytest
import torch

import cvt_mm  # noqa: F401  (registers the backbones, patches the stack)
from cvt_mm.apis.end2end import ops
from cvt_mm.models.cmt import ARCH_DEFAULTS, CMT

from helpers import CONFIGS, SHAPES

MISSING = [m for m in ('onnx', 'onnxscript', 'onnxruntime') if importlib.util.find_spec(m) is None]
needs_deploy = pytest.mark.skipif(
    bool(MISSING), reason=f'{", ".join(MISSING)} not installed; install the deploy extra: '
    'pip install -e .[deploy]')


def random_boxes(gen, count: int, height: float, width: float, largest: float = 60.):
    """x1, y1, x2, y2 boxes, some reaching past the image, then clipped to it as decoded
    boxes are."""
    xy = torch.rand(count, 2, generator=gen) * torch.tensor([width, height]) - 10
    wh = torch.rand(count, 2, generator=gen) * largest + 0.5
    boxes = torch.cat([xy, xy + wh], 1)
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, width)
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, height)
    return boxes


# ----------------------------------------------------------------- the restated operations
@pytest.mark.parametrize('count,max_num', [(400, 50), (30, 50)])
def test_batched_nms_rows_equal_mmcv_batched_nms(count, max_num):
    """MMCV's batched_nms on the valid rows, its first max_num: the same boxes, scores and
    ids in the same order, then rows marked unused (fewer survivors than rows)."""
    from mmcv.ops import batched_nms
    gen = torch.Generator().manual_seed(count)
    boxes = random_boxes(gen, count, 80, 100)
    scores = torch.rand(count, generator=gen)
    ids = torch.randint(0, 4, (count, ), generator=gen)
    valid = torch.rand(count, generator=gen) > 0.3
    dets, keep = batched_nms(boxes[valid], scores[valid], ids[valid],
                             dict(type='nms', iou_threshold=0.5))
    dets, keep = dets[:max_num], keep[:max_num]
    got_boxes, got_scores, got_ids, kept = ops.batched_nms_rows(boxes, scores, ids, valid, 0.5,
                                                                max_num)
    n = len(keep)
    assert got_boxes.shape == (max_num, 4) and kept.tolist() == [True] * n + [False] * (max_num - n)
    assert n == (max_num if count > max_num else n) and 0 < n
    torch.testing.assert_close(got_boxes[:n], dets[:, :4], rtol=0, atol=0)
    torch.testing.assert_close(got_scores[:n], dets[:, 4], rtol=0, atol=0)
    assert torch.equal(got_ids[:n], ids[valid][keep])


def test_decode_boxes_equals_the_coder_with_its_clamps():
    """DeltaXYWHBBoxCoder.decode with max_shape, deltas large enough that the aspect clamp
    (wh_ratio_clip) and the clip to the image both act."""
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder
    gen = torch.Generator().manual_seed(0)
    coder = DeltaXYWHBBoxCoder(target_means=[0., 0., 0., 0.], target_stds=[.1, .1, .2, .2])
    priors = random_boxes(gen, 500, 70, 90)
    deltas = torch.randn(500, 4, generator=gen) * 20
    expected = coder.decode(priors, deltas, max_shape=(70, 90))
    assert (expected == 0).any() and (expected[:, 2] == 90).any()  # both clips acted
    torch.testing.assert_close(ops.decode_boxes(coder, priors, deltas, (70, 90)), expected,
                               rtol=0, atol=0)


def test_roi_align_levels_equals_single_roi_extractor():
    """SingleRoIExtractor (MMCV RoIAlign per pyramid level, RoIs assigned by scale), RoIs
    of every level, two images, one zero-size RoI."""
    from mmdet.models.roi_heads.roi_extractors import SingleRoIExtractor
    gen = torch.Generator().manual_seed(0)
    extractor = SingleRoIExtractor(
        dict(type='RoIAlign', output_size=7, sampling_ratio=0), out_channels=8,
        featmap_strides=[4, 8, 16, 32])
    feats = [torch.randn(2, 8, 512 // s, 640 // s, generator=gen) for s in (4, 8, 16, 32)]
    boxes = random_boxes(gen, 200, 512, 640, largest=700)
    boxes[0, 2:] = boxes[0, :2]
    rois = torch.cat([torch.randint(0, 2, (200, 1), generator=gen).float(), boxes], 1)
    levels = extractor.map_roi_levels(rois, 4)
    assert set(levels.tolist()) == {0, 1, 2, 3}
    ops.check_roi_extractor(extractor, 'test')
    torch.testing.assert_close(ops.roi_align_levels(extractor, feats, rois),
                               extractor(feats, rois), rtol=0, atol=0)


def test_paste_masks_equals_mmdet_pasting_on_the_cpu():
    """_do_paste_mask (CPU: skip_empty) then >= 0.5, box by box, boxes clipped at the image
    border and of zero width: the same pixels."""
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import _do_paste_mask
    gen = torch.Generator().manual_seed(0)
    masks = torch.rand(120, 28, 28, generator=gen)
    boxes = random_boxes(gen, 120, 70, 90, largest=80)
    boxes[:3, 2] = boxes[:3, 0]
    got = ops.paste_masks(masks, boxes, 70, 90, 0.5)
    for mask, box, pasted in zip(masks, boxes, got):
        part, (rows, cols) = _do_paste_mask(mask[None, None], box[None], 70, 90, skip_empty=True)
        expected = torch.zeros(70, 90, dtype=torch.bool)
        expected[rows, cols] = part[0] >= 0.5
        assert torch.equal(pasted, expected), box


def test_top_rows_keeps_every_row_of_a_short_level_and_marks_the_padding():
    scores, index, rows = ops.top_rows(torch.tensor([.2, .9, .5]), 5, torch.arange(3))
    assert scores.tolist()[:3] == pytest.approx([.9, .5, .2])
    assert scores.tolist()[3:] == [ops.INVALID_SCORE] * 2
    assert rows.tolist()[:3] == [1, 2, 0] and min(index.tolist()[3:]) >= 3  # appended rows


@needs_deploy
def test_nms_translates_to_onnx_nonmaxsuppression_with_the_same_result(tmp_path):
    """cvt_mm::nms_mask in a graph: ONNX's NonMaxSuppression (no custom domain), ONNX
    Runtime keeps the boxes PyTorch keeps: scores at the threshold dropped, IoU at the
    threshold kept (both strict), max_output honoured."""
    import onnx
    import onnxruntime as ort

    class Keep(torch.nn.Module):
        def forward(self, boxes, scores):
            return ops.nms_mask(boxes, scores, 0.5, 0.05, 40)

    gen = torch.Generator().manual_seed(0)
    boxes = random_boxes(gen, 300, 80, 100)
    boxes[1] = torch.tensor([0., 0., 10., 10.])
    boxes[2] = torch.tensor([0., 0., 10., 20.])  # IoU 0.5 with boxes[1]: kept
    scores = torch.rand(300, generator=gen)
    scores[1:3] = torch.tensor([.999, .998])
    scores[3] = 0.05
    path = str(tmp_path / 'nms.onnx')
    torch.onnx.export(Keep(), (boxes, scores), dynamo=True, verbose=False,
                      custom_translation_table=ops.onnx_translations()).save(path)
    assert {n.domain for n in onnx.load(path).graph.node} <= {'', 'ai.onnx'}
    assert 'NonMaxSuppression' in {n.op_type for n in onnx.load(path).graph.node}
    got = ort.InferenceSession(path, providers=['CPUExecutionProvider']).run(
        None, {'boxes': boxes.numpy(), 'scores': scores.numpy()})[0]
    expected = Keep()(boxes, scores).numpy()
    assert expected.sum() == 40 and expected[1] and expected[2] and not expected[3]
    assert np.array_equal(got, expected)


# ----------------------------------------------------------------- the other families
NARROW_BACKBONE = ("backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64], "
                   "num_heads=[1, 2, 4], depths=[1, 1, 2]), init_cfg=None)")
# CMT-Ti's arch (widths, heads, reduction ratios, stem, stored bias grids) at one block per
# stage: the whole-model export of a CMT detector, whose bias resizing traces its own way.
CMT_TI = {**ARCH_DEFAULTS, **CMT.arch_zoo['ti'], 'depths': [1, 1, 1, 1]}
FAMILIES = {
    # base config, its narrowed model, export size (twice the coarsest stride and more)
    'cascade': ('cascade_mask_rcnn_cmt_s_coco.py', f"""model = dict(
    backbone=dict(arch=dict(_delete_=True, **{CMT_TI!r}), init_cfg=None),
    neck=dict(in_channels={CMT_TI['embed_dims']!r}, out_channels=32),
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(bbox_roi_extractor=dict(out_channels=32),
                  bbox_head=[dict(h, in_channels=32, conv_out_channels=32, fc_out_channels=64,
                                  num_classes=3) for h in _base_.model.roi_head.bbox_head],
                  mask_roi_extractor=dict(out_channels=32),
                  mask_head=dict(in_channels=32, conv_out_channels=32, num_classes=3)),
    # Random weights score the 3 classes and background about 1/4 each.
    test_cfg=dict(rcnn=dict(score_thr=0.26)))
""", (96, 128)),
    'retinanet': ('retinanet_cvt13_coco.py', f"""model = dict({NARROW_BACKBONE},
    neck=dict(in_channels=[32, 64], out_channels=32),
    bbox_head=dict(in_channels=32, feat_channels=32, stacked_convs=1, num_classes=3))
""", (160, 192)),
}


def family_config(tmp_path, family: str) -> str:
    base, model, _ = FAMILIES[family]
    path = tmp_path / f'{family}.py'
    path.write_text(f'_base_ = {osp.join(CONFIGS, base)!r}\n{model}'
                    f'test_dataloader = dict(dataset=dict(metainfo=dict(classes={SHAPES!r})))\n')
    return str(path)


@pytest.mark.slow
@needs_deploy
@pytest.mark.parametrize('family', list(FAMILIES))
def test_each_family_exports_whole_and_equals_its_predict(family, tmp_path):
    """Random weights (RetinaNet's class logits spread so that its scores cover (0, 1), as
    a trained head's do), dynamic size; ONNX Runtime against the model's predict at the
    export size and an odd other size: every detection matched (Cascade: with its mask)."""
    from cvt_mm.apis.deployment import build_part, compare_end2end, export_onnx
    torch.manual_seed(0)
    module, info = build_part(family_config(tmp_path, family))
    if family == 'retinanet':
        torch.nn.init.normal_(module.model.bbox_head.retina_cls.weight, std=0.3)
        torch.nn.init.zeros_(module.model.bbox_head.retina_cls.bias)
    shape = FAMILIES[family][2]
    path = str(tmp_path / f'{family}.onnx')
    export_onnx(module, path, shape, dynamic=True, names=info['outputs'],
                metadata=info['metadata'])
    # Cascade's CMT-Ti also at its ImageNet size, 160, where it uses its stored bias grids.
    other = (160, 160) if family == 'cascade' else (shape[0] * 5 // 4 | 1, shape[1] * 3 // 4 | 1)
    rows = compare_end2end(module, path, [shape, other])
    assert [r['shape'] for r in rows] == [shape, other]
    failed = [r for r in rows if not r['ok']]
    assert not failed, failed
    assert all(r['matched'] >= 5 for r in rows), rows  # something to compare
