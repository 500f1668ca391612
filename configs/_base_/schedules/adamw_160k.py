# The AdamW 160k recipe of our ADE20K configs, as MMSegmentation's Swin UperNet: AdamW lr 6e-5,
# weight decay 0.01, 1500-iteration linear warmup, then poly decay to 0 at 160k iterations,
# 16 images per iteration (2 per GPU x 8 GPUs, see datasets/ade20k_bs2.py).
# The training guards come with it (../training_guards.py).
_base_ = ['mmseg::_base_/schedules/schedule_160k.py', '../training_guards.py']

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    # No weight decay on normalisation layers (by module type), CvT's cls token or CMT's
    # relative position biases.
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'cls_token': dict(decay_mult=0.),
            'relative_pos': dict(decay_mult=0.),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
auto_scale_lr = dict(enable=False, base_batch_size=16)
# MMEngine's iteration loop, resumable without replaying the data (cvt_mm.engine.runner).
train_cfg = dict(type='ResumableIterBasedTrainLoop')
