# MMSegmentation's Semantic FPN with a CMT-S backbone (../backbones/cmt_s.py: the official
# ImageNet-1k file): CMT's four stages (strides 4-32) are the base model's levels.
_base_ = ['mmseg::_base_/models/fpn_r50.py', '../backbones/cmt_s.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

data_preprocessor = dict(size=(512, 512))
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3)),
    neck=dict(in_channels=[64, 128, 256, 512]),
    decode_head=dict(num_classes=150))

sync_bn = 'torch'  # as our UperNet (upernet_cmt_s.py)
