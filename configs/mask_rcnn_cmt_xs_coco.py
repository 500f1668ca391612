# Mask R-CNN + FPN with CMT-XS on COCO, 1x: the CMT-S recipe with another model size.
_base_ = './mask_rcnn_cmt_s_coco.py'

pretrained = 'checkpoints/cmt_xs.pth'
model = dict(
    backbone=dict(arch='xs', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[52, 104, 208, 416]))
