# Mask2Former with CMT-S for ADE20K semantic segmentation: MMSegmentation's
# mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py with the CMT-S backbone, whose four
# stages (strides 4-32) are the head's levels (no neck). Recipe as mask2former_cvt13_ade20k.py.
_base_ = [
    'mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
    './_base_/backbones/cmt_s.py',
    './_base_/training_guards.py',
    './_base_/mask2former_param_groups.py',
]
custom_imports = dict(imports=['mmdet.models', 'cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableIterBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3)),
    decode_head=dict(in_channels=[64, 128, 256, 512]))
sync_bn = 'torch'  # as our UperNet (upernet_cmt_s.py)
optim_wrapper = _base_.mask2former_optim_wrapper  # (_base_/mask2former_param_groups.py)
