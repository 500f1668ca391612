# Cascade Mask R-CNN + FPN with CvT-13 on COCO, 1x: MMDetection's cascade 1x (single-scale
# 1333x800 training, 12 epochs) with the Swin/ConvNeXt GIoU box heads and the AdamW recipe of
# our Mask R-CNN (lr 1e-4, weight decay 0.05, no layer-wise decay: Swin's cascade recipe;
# ConvNeXt's 2e-4 with layer decay 0.7 was tuned for ConvNeXt's stages).
_base_ = [
    './_base_/models/cascade_mask_rcnn_cvt13_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
