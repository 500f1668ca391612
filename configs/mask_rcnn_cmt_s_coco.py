# Mask R-CNN + FPN with CMT-S on COCO, 1x: the recipe of mask_rcnn_cvt13_coco.py (AdamW 1e-4 /
# 0.05, 16 images per iteration, steps at epochs 8 and 11). The CMT paper reports 44.6 box AP
# and 40.7 mask AP for this detector.
_base_ = [
    './_base_/models/mask_rcnn_cmt_s_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
