# Stage 1 of `make demo`: classification pretraining of CvT-13 with our ImageNet recipe
# (configs/imagenet_cvt13_300e_in1k.py) on the ImageNet-layout shapes set that
# tools/misc/make_demo_data.py writes (one shape per 64 px image, three classes). Only data,
# resolution, augmentation and schedule shrink; the model and the optimizer are the recipe's.
# Its last checkpoint initialises configs/demo/mask_rcnn_cvt13_demo.py, as an ImageNet
# checkpoint initialises configs/mask_rcnn_cvt13_coco.py.
_base_ = '../imagenet_cvt13_300e_in1k.py'

data_root = 'data/demo/imagenet'
classes = ('circle', 'square', 'triangle')

model = dict(
    backbone=dict(num_classes=len(classes), drop_path_rate=0.),
    # No Mixup/CutMix: they regularise 300 epochs; a few epochs underfit instead.
    train_cfg=None)
data_preprocessor = dict(num_classes=len(classes))

# The shapes are already centred and whole: a flip is the only augmentation that keeps
# every image a correct example (random crops would cut shapes off).
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
dataset = dict(type='ImageNet', data_root=data_root, metainfo=dict(classes=classes))
train_dataloader = dict(
    batch_size=32, num_workers=1,
    dataset=dict(**dataset, split='train', pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=64, num_workers=1,
    dataset=dict(**dataset, split='val', pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))  # top-5 of three classes is always 100%
test_evaluator = val_evaluator

base_lr = 1e-3
max_epochs = 3
optim_wrapper = dict(optimizer=dict(lr=base_lr))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=0, end=max_epochs,
         T_max=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs, val_interval=1)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1, save_best=None))
randomness = dict(seed=0, deterministic=True)
