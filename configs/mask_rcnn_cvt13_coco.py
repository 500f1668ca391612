# Mask R-CNN + FPN with a CvT-13 backbone on COCO, 1x schedule (12 epochs), 16 images per
# iteration (2 per GPU x 8 GPUs). Recipe as MMDetection's Swin Mask R-CNN: AdamW lr 1e-4,
# weight decay 0.05, 1000-iteration linear warmup, LR x0.1 after epochs 8 and 11.
_base_ = [
    './_base_/models/mask_rcnn_cvt13_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
