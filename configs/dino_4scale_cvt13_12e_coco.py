# DINO (4 scales) with CvT-13 on COCO detection, 12 epochs: MMDetection's
# dino/dino-4scale_r50_8xb2-12e_coco.py (model, multi-scale crop training, AdamW lr 1e-4 /
# weight decay 1e-4, backbone at 0.1x the LR, gradients clipped at 0.1, LR x0.1 after epoch
# 11, 16 images per iteration) with the CvT-13 backbone. Not yet trained here.
_base_ = [
    'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py',
    './_base_/backbones/cvt13.py',
    './_base_/training_guards.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableEpochBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    # Drop path 0.1 (_base_/backbones/cvt13.py), our Mask R-CNN's (DINO's Swin-L keeps its 0.2
    # too).
    # The strides DINO's R-50 4-scale model attends over are 8/16/32/64: C3-C4 here
    # (strides 8 and 16), stage 0 not returned (no unused output norm under DDP).
    # BatchNorm at 2 images per GPU: as our Mask R-CNN.
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(1, 2), norm_eval=True),
    # ChannelMapper maps C3-C4 to 256 channels (1x1 conv + GN) and adds the stride-32 and
    # stride-64 levels with stride-2 3x3 convs + GN, the first on C4 itself: deformable
    # attention samples the same four strides (8-64) as with R-50, where only the stride-64
    # level is synthetic. The alternative, strides 4/8/16/32 (stage 0 in, one synthetic
    # level), puts 4x the tokens into the encoder: measured in docs/detection_segmentation.md.
    neck=dict(in_channels=[192, 384]))
# The backbone trains at 0.1x the LR (DINO's recipe); CvT's cls token has no weight decay,
# as in our other recipes (a matching custom key takes precedence over 'backbone', so it
# repeats the backbone's lr_mult).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
