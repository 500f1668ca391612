# Mask R-CNN + FPN with CvT-13 on COCO, 3x schedule (36 epochs) with multi-scale training and
# random crops: MMDetection's Swin 3x recipe (augmentation from DETR / Sparse R-CNN).
_base_ = [
    './_base_/models/mask_rcnn_cvt13_fpn.py',
    './_base_/datasets/coco_instance_ms-crop.py',
    './_base_/schedules/adamw_3x.py',
    'mmdet::_base_/default_runtime.py',
]
