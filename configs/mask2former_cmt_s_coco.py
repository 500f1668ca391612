# Mask2Former with CMT-S for COCO instance segmentation: MMDetection's
# mask2former/mask2former_r50_8xb2-lsj-50e_coco.py with the CMT-S backbone, whose four stages
# (strides 4-32) are exactly the levels the head reads (no neck). Recipe as
# mask2former_cvt13_coco.py.
_base_ = [
    'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py',
    './_base_/backbones/cmt_s.py',
    './_base_/training_guards.py',
    './_base_/mask2former_param_groups.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableIterBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    # BatchNorm at 2 images per GPU, as the base's R-50.
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3), norm_eval=True),
    panoptic_head=dict(in_channels=[64, 128, 256, 512]),
    init_cfg=None)
# MMDetection's instance config keeps its panoptic base's seg folder (annotations/panoptic_*),
# which instance segmentation never reads; data checks would ask for it.
train_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='train2017/')))
val_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='val2017/')))
test_dataloader = val_dataloader
optim_wrapper = _base_.mask2former_optim_wrapper  # (_base_/mask2former_param_groups.py)
