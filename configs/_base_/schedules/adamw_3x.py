# The AdamW 3x recipe (36 epochs, LR x0.1 after epochs 27 and 33): MMDetection's Swin 3x
# schedule. Use it with `datasets/coco_instance_ms-crop.py`, the augmentation it was made for.
_base_ = './adamw_1x.py'

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33],
         gamma=0.1),
]
