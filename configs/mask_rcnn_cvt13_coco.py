# Mask R-CNN + FPN with a CvT-13 backbone on COCO, 1x schedule (12 epochs), 16 images per
# iteration (2 per GPU x 8 GPUs). Recipe as MMDetection's Swin Mask R-CNN: AdamW lr 1e-4,
# weight decay 0.05, 1000-iteration linear warmup, LR x0.1 after epochs 8 and 11.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

# The official ImageNet-1k file, loaded as published (see README "Checkpoints").
pretrained = 'checkpoints/CvT-13-224x224-IN-1k.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CvT',
        arch='13',
        out_indices=(0, 1, 2),
        # A LayerNorm on each output, as Swin/PVT give their dense-prediction outputs.
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        drop_path_rate=0.1,
        # BatchNorm at 2 images per GPU: keep the ImageNet statistics (the BN affine
        # parameters still train), as MMDetection does for its BN backbones (ResNet, RegNet,
        # HRNet). Statistics of 2 images are noisy and differ between training and testing;
        # SyncBN would cost two all-reduces per BN layer per step to re-estimate statistics
        # that a 1x fine-tuning barely moves.
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    # CvT has three stages (strides 4, 8, 16). FPN turns them into P2-P4 and adds P5 (stride
    # 32) and P6 (stride 64) with stride-2 3x3 convs: P5 is computed from C4 itself
    # ('on_input'), so the level that the RoI extractor uses for large objects is learned
    # from the richest backbone features rather than max-pooled from P4, and a ReLU sits
    # between the two extra convs so that P6 is not just a linear function of P5. The
    # detector then sees MMDetection's standard five levels: RPN anchor strides
    # [4, 8, 16, 32, 64] and RoI featmap_strides [4, 8, 16, 32] stay as in the base config.
    neck=dict(
        in_channels=[64, 192, 384],
        num_outs=5,
        add_extra_convs='on_input',
        relu_before_extra_convs=True))

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11],
         gamma=0.1),
]
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    # No weight decay on normalisation layers (any LayerNorm/BatchNorm, by module type), on
    # CvT's cls token, or on CMT's relative position biases.
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'cls_token': dict(decay_mult=0.),
            'relative_pos': dict(decay_mult=0.),
        }))
# 16 = 8 GPUs x 2 images; `tools/train.py --auto-scale-lr` rescales the LR for other setups.
auto_scale_lr = dict(enable=False, base_batch_size=16)
