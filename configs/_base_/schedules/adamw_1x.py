# The AdamW 1x recipe of our COCO detection configs, as MMDetection's Swin/PVT configs and the
# CvT/CMT detection setups use: AdamW lr 1e-4, weight decay 0.05, 12 epochs, 1000-iteration
# linear warmup, LR x0.1 after epochs 8 and 11, 16 images per iteration (2 per GPU x 8 GPUs).
# A delta on MMDetection's SGD 1x schedule (its train/val/test loops are kept); inherit it
# beside the model, dataset and runtime bases in place of `mmdet::_base_/schedules/schedule_1x.py`.
# The training guards come with it (../training_guards.py).
_base_ = ['mmdet::_base_/schedules/schedule_1x.py', '../training_guards.py']

max_epochs = 12
# MMEngine's epoch loop, resumable mid-epoch (cvt_mm.engine.runner).
train_cfg = dict(type='ResumableEpochBasedTrainLoop', max_epochs=max_epochs)
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
