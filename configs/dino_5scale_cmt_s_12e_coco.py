# DINO with five scales (strides 4-64) and CMT-S on COCO, 12 epochs: CMT's four stages (4-32)
# and a stride-64 level by a stride-2 conv, exactly as MMDetection's 5-scale Swin-L config.
_base_ = './dino_4scale_cmt_s_12e_coco.py'

num_levels = 5
model = dict(
    num_feature_levels=num_levels,
    backbone=dict(out_indices=(0, 1, 2, 3)),
    neck=dict(in_channels=[64, 128, 256, 512], num_outs=num_levels),
    encoder=dict(layer_cfg=dict(self_attn_cfg=dict(num_levels=num_levels))),
    decoder=dict(layer_cfg=dict(cross_attn_cfg=dict(num_levels=num_levels))))
