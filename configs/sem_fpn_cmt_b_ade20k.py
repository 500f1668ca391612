# Semantic FPN with CMT-B on ADE20K (40k): the CMT-S recipe with the larger model.
_base_ = './sem_fpn_cmt_s_ade20k.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[76, 152, 304, 608]))
