# The AdamW 40k recipe of our Semantic FPN configs, PVT's (Wang et al., ICCV 2021; whai362/PVT
# segmentation/configs/sem_fpn/PVT/fpn_pvt_s_ade20k_40k.py, which VAN and the papers that compare
# with PVT reuse): AdamW lr 2e-4 (1e-4 x its gpu_multiples=2), weight decay 1e-4, 40k
# iterations of 32 images (4 per GPU x 8 GPUs, its samples_per_gpu=4: the configs set the
# batch), poly decay with power 0.9, about 63 ADE20K epochs. MMSegmentation's own Semantic
# FPN recipe (SGD 0.01, 160k) is for ResNets.
# The training guards come with it (../training_guards.py).
_base_ = ['mmseg::_base_/schedules/schedule_40k.py', '../training_guards.py']

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4),
    # No weight decay on normalisation layers, CvT's cls token or CMT's relative position
    # biases, as in our other recipes.
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'cls_token': dict(decay_mult=0.),
            'relative_pos': dict(decay_mult=0.),
        }))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]
auto_scale_lr = dict(enable=False, base_batch_size=32)
# MMEngine's iteration loop, resumable without replaying the data (cvt_mm.engine.runner).
train_cfg = dict(type='ResumableIterBasedTrainLoop')
