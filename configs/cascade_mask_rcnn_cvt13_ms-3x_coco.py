# Cascade Mask R-CNN + FPN with CvT-13 on COCO, 3x with multi-scale training and random crops:
# the recipe of the Swin-T/ConvNeXt-T Cascade Mask R-CNN 3x results (augmentation from DETR),
# AdamW lr 1e-4 / weight decay 0.05 as Swin's.
_base_ = [
    './_base_/models/cascade_mask_rcnn_cvt13_fpn.py',
    './_base_/datasets/coco_instance_ms-crop.py',
    './_base_/schedules/adamw_3x.py',
    'mmdet::_base_/default_runtime.py',
]
