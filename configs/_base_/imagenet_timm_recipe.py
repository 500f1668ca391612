# What the official CvT and CMT ImageNet recipes share: both train with timm's DeiT-style
# pipeline and loss (microsoft/CvT experiments/imagenet/cvt/*.yaml; huawei-noah
# Efficient-AI-Backbones cmt_pytorch/train.py). The model configs set the backbone, the
# resolution, batch size, LR, weight decay, schedule and EMA.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
    './training_guards.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
# MMEngine's epoch loop, resumable mid-epoch, in place of MMPretrain's short form
# (dict(by_epoch=True, ...)); the model configs set max_epochs.
train_cfg = dict(_delete_=True, type='ResumableEpochBasedTrainLoop', max_epochs=300,
                 val_interval=1)

num_classes = 1000
# The classifier trains the backbone's own classification stage: the backbone (out_type=
# 'logits') returns the class scores and the plain ClsHead only computes the loss, so the
# checkpoints hold an ImageNet backbone under `backbone.`.
model = dict(
    type='ImageClassifier',
    neck=None,
    head=dict(
        type='ClsHead',
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')),
    # One of Mixup (alpha 0.8) / CutMix (alpha 1.0) on every batch, each with probability
    # 0.5: timm's mixup_prob 1.0, switch_prob 0.5.
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))
data_preprocessor = dict(num_classes=num_classes)

bgr_mean = [103.53, 116.28, 123.675]
bgr_std = [57.375, 57.12, 58.395]
# timm's rand-m9-mstd0.5-inc1; timm turns colour jitter off when RandAugment is on.
rand_augment = dict(
    type='RandAugment', policies='timm_increasing', num_policies=2, total_level=10,
    magnitude_level=9, magnitude_std=0.5,
    hparams=dict(pad_val=[round(x) for x in bgr_mean], interpolation='bicubic'))
# timm's re_prob 0.25, 'pixel' mode: per-pixel normal noise in normalised space.
random_erasing = dict(
    type='RandomErasing', erase_prob=0.25, mode='rand', min_area_ratio=0.02,
    max_area_ratio=1 / 3, fill_color=bgr_mean, fill_std=bgr_std)

# timm's training and test transforms at 224 (bicubic RandomResizedCrop + flip, RandAugment,
# random erasing; test: short side to 256 = 224 / 0.875, center crop 224). A config at another
# resolution replaces both lists with its own sizes.
img_size = 224
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=img_size, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    rand_augment,
    random_erasing,
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=int(256 / 224 * img_size), edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=img_size),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', eps=1e-8, betas=(0.9, 0.999)),
    # Neither official recipe decays 1-D parameters (norms) or biases.
    paramwise_cfg=dict(_delete_=True, flat_decay_mult=0.0, bias_decay_mult=0.0),
    # Neither clips gradients (the swin schedule base does).
    clip_grad=None)

default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3,
                                     save_best='auto'))
