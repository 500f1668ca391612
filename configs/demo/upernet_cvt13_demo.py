# Stage 5 of `make demo`: configs/upernet_cvt13_ade20k.py fine-tuned on the ADE20K-layout
# shapes data of tools/misc/make_demo_data.py, its backbone initialised through init_cfg from
# the checkpoint of the demo's pretraining (configs/demo/imagenet_cvt13_demo.py). Data, scale
# (crop, head widths) and schedule shrink; backbone and head types are the real ones.
_base_ = '../upernet_cvt13_ade20k.py'

data_root = 'data/demo/ade/'
metainfo = dict(classes=('background', 'circle', 'square', 'triangle'),
                palette=[[120, 120, 120], [220, 20, 60], [0, 130, 230], [250, 170, 30]])
crop_size = (96, 96)
image_scale = (128, 128)

# What `python tools/train.py configs/demo/imagenet_cvt13_demo.py` writes last.
pretrained = 'work_dirs/imagenet_cvt13_demo/epoch_3.pth'

model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=dict(checkpoint=pretrained), drop_path_rate=0.),
    # Narrower heads than the real 512/256 channels keep the demo's CPU time small.
    decode_head=dict(num_classes=4, channels=128),
    auxiliary_head=dict(num_classes=4, channels=64))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=image_scale, ratio_range=(0.75, 1.25), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
# The shapes classes are not a subset of ADE20K's 150, so the generic dataset class reads
# the same layout (ADE's .jpg/.png pairs and reduce-zero-label convention).
shapes_dataset = dict(type='BaseSegDataset', data_root=data_root, metainfo=metainfo,
                      img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True)
train_dataloader = dict(
    batch_size=4, num_workers=1,
    dataset=dict(**shapes_dataset, pipeline=train_pipeline,
                 data_prefix=dict(img_path='images/training',
                                  seg_map_path='annotations/training')))
val_dataloader = dict(
    batch_size=1, num_workers=1,
    dataset=dict(**shapes_dataset, pipeline=test_pipeline,
                 data_prefix=dict(img_path='images/validation',
                                  seg_map_path='annotations/validation')))
test_dataloader = val_dataloader

max_iters = 400
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=40),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=40, end=max_iters, by_epoch=False),
]
optim_wrapper = dict(optimizer=dict(lr=4e-4))
default_hooks = dict(logger=dict(interval=10),
                     checkpoint=dict(by_epoch=False, interval=max_iters, max_keep_ckpts=1))
randomness = dict(seed=0, deterministic=True)
