# Mask2Former with CMT-B for COCO instance segmentation: the CMT-S recipe with the larger model.
_base_ = './mask2former_cmt_s_coco.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    panoptic_head=dict(in_channels=[76, 152, 304, 608]))
