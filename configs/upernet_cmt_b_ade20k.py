# UperNet with CMT-B on ADE20K (160k): the CMT-S recipe with the larger model.
_base_ = './upernet_cmt_s_ade20k.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[76, 152, 304, 608]),
    auxiliary_head=dict(in_channels=304))
