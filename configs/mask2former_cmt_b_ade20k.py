# Mask2Former with CMT-B for ADE20K: the CMT-S recipe with the larger model.
_base_ = './mask2former_cmt_s_ade20k.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[76, 152, 304, 608]))
