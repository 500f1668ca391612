# DINO (4 scales) with CMT-S on COCO detection, 12 epochs: MMDetection's
# dino/dino-4scale_r50_8xb2-12e_coco.py with the CMT-S backbone (recipe as
# dino_4scale_cvt13_12e_coco.py). Not yet trained here.
_base_ = [
    'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py',
    './_base_/backbones/cmt_s.py',
    './_base_/training_guards.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableEpochBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    # C3-C5 (strides 8-32) as R-50's; ChannelMapper adds stride 64 by a stride-2 conv.
    # BatchNorm at 2 images per GPU: as our Mask R-CNN.
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(1, 2, 3), norm_eval=True),
    neck=dict(in_channels=[128, 256, 512]))
# Backbone at 0.1x the LR (DINO's recipe); CMT's relative position biases without weight decay.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
