# RetinaNet + FPN with CMT-S on COCO, 1x: the CMT paper's headline COCO result (Guo et al.,
# CVPR 2022, Table 6: 44.3 box AP on val2017, 231G FLOPs at 1280x800, which this model counts
# too: docs/model_zoo.md). MMDetection's `retinanet/retinanet_r50_fpn_1x_coco.py` (same model,
# data, runtime and TTA bases) with the CMT-S backbone and the AdamW 1x recipe of our Mask R-CNN
# configs in place of its SGD schedule. Not yet trained here.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
    'mmdet::retinanet/retinanet_tta.py',
    './_base_/backbones/cmt_s.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # RetinaNet reads C3-C5 only: stage 0 is computed but not returned, so no output norm is
    # built for it (an unused one would get no gradient, which DDP rejects). norm_eval: the
    # Mask R-CNN configs' BatchNorm policy (2 images per GPU).
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(1, 2, 3), norm_eval=True),
    # P3-P5 from C3-C5 (strides 8-32), P6 by a stride-2 conv on C5 and P7 on P6: the base
    # config's levels (anchor strides 8-128), fed as MMDetection's Swin RetinaNet feeds them.
    neck=dict(in_channels=[128, 256, 512], start_level=0))
# Weight decay 1e-4, not the Mask R-CNN recipe's 0.05: the RetinaNet recipe of PVT
# (whai362/PVT detection/configs/retinanet_pvt_s_fpn_1x_coco.py; MMDetection's
# retinanet_pvt-s_fpn_1x_coco.py and its PVTv2 RetinaNets), the family the CMT paper compares
# its RetinaNet with. AdamW lr 1e-4, 16 images, 1x, as there.
optim_wrapper = dict(optimizer=dict(weight_decay=1e-4))
