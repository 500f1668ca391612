# Cascade Mask R-CNN + FPN with CMT-S on COCO, 3x multi-scale: the recipe of
# cascade_mask_rcnn_cvt13_ms-3x_coco.py.
_base_ = [
    './_base_/models/cascade_mask_rcnn_cmt_s_fpn.py',
    './_base_/datasets/coco_instance_ms-crop.py',
    './_base_/schedules/adamw_3x.py',
    'mmdet::_base_/default_runtime.py',
]
