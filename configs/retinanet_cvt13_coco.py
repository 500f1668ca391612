# RetinaNet + FPN with CvT-13 on COCO, 1x. MMDetection's `retinanet/retinanet_r50_fpn_1x_coco.py`
# (same model, data, runtime and TTA bases) with the CvT-13 backbone and the AdamW 1x recipe of
# our Mask R-CNN configs in place of its SGD schedule. The CvT paper reports no COCO results;
# not yet trained here.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
    'mmdet::retinanet/retinanet_tta.py',
    './_base_/backbones/cvt13.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # RetinaNet reads strides 8 and 16 only (CvT has no stride-32 stage): stage 0 is not
    # returned, so no output norm is built for it (it would get no gradient under DDP).
    # norm_eval: the Mask R-CNN configs' BatchNorm policy (2 images per GPU).
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(1, 2), norm_eval=True),
    # P3-P4 from C3-C4; P5 (stride 32) by a stride-2 conv on C4 itself, then P6 and P7, with a
    # ReLU between extra convs as in the CvT Mask R-CNN config: the base config's five levels
    # (anchor strides 8-128) on a three-stage backbone.
    neck=dict(in_channels=[192, 384], start_level=0, relu_before_extra_convs=True))
# Weight decay 1e-4, not the Mask R-CNN recipe's 0.05: the RetinaNet recipe of PVT
# (whai362/PVT detection/configs/retinanet_pvt_s_fpn_1x_coco.py; MMDetection's
# retinanet_pvt-s_fpn_1x_coco.py and its PVTv2 RetinaNets), the family the CMT paper compares
# its RetinaNet with. AdamW lr 1e-4, 16 images, 1x, as there.
optim_wrapper = dict(optimizer=dict(weight_decay=1e-4))
