# DINO with five scales (strides 4-64) and CvT-13 on COCO, 12 epochs: the 4-scale recipe with
# CvT's stride-4 stage as the fifth level, as MMDetection's 5-scale Swin-L config adds Swin's
# stride-4 stage. Three real levels (4/8/16) and two synthetic ones (32, 64).
_base_ = './dino_4scale_cvt13_12e_coco.py'

num_levels = 5
model = dict(
    num_feature_levels=num_levels,
    backbone=dict(out_indices=(0, 1, 2)),
    neck=dict(in_channels=[64, 192, 384], num_outs=num_levels),
    encoder=dict(layer_cfg=dict(self_attn_cfg=dict(num_levels=num_levels))),
    decoder=dict(layer_cfg=dict(cross_attn_cfg=dict(num_levels=num_levels))))
