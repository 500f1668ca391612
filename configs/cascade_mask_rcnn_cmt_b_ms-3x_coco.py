# Cascade Mask R-CNN with CMT-B on COCO, 3x multi-scale: the CMT-S 3x recipe with the larger
# model.
_base_ = './cascade_mask_rcnn_cmt_s_ms-3x_coco.py'

pretrained = 'checkpoints/cmt_base.pth'
model = dict(
    backbone=dict(arch='b', init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[76, 152, 304, 608]))
