# DINO (4 scales) with CMT-B on COCO, 12 epochs: the CMT-S recipe with the larger model.
_base_ = './dino_4scale_cmt_s_12e_coco.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[152, 304, 608]))
