# Cascade Mask R-CNN + FPN with CMT-S on COCO, 1x: the recipe of cascade_mask_rcnn_cvt13_coco.py.
_base_ = [
    './_base_/models/cascade_mask_rcnn_cmt_s_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
