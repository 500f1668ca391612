# Mask R-CNN + FPN with CMT-Ti on COCO, 1x: the CMT-S recipe with another model size.
_base_ = './mask_rcnn_cmt_s_coco.py'

pretrained = 'checkpoints/cmt_tiny.pth'
model = dict(
    backbone=dict(arch='ti', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[46, 92, 184, 368]))
