# MMSegmentation's Semantic FPN with a CMT-S backbone, initialised from the official
# ImageNet-1k file: CMT's four stages (strides 4-32) are the base model's levels.
_base_ = 'mmseg::_base_/models/fpn_r50.py'
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

data_preprocessor = dict(size=(512, 512))
pretrained = 'checkpoints/cmt_small.pth'
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='CMT',
        arch='s',
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        selective_cp=True,  # 0.45x the activation memory, same gradients: docs/benchmarks.md
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 256, 512]),
    decode_head=dict(num_classes=150))

sync_bn = 'torch'  # as our UperNet (upernet_cmt_s.py)
