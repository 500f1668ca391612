# The README's demo: configs/mask_rcnn_cvt13_coco.py trained from scratch on the shapes data
# of tools/misc/make_demo_data.py, on a CPU in minutes. Only data, scale and schedule shrink; the
# model (CvT-13 + 5-level FPN + Mask R-CNN heads) is the real one.
_base_ = '../mask_rcnn_cvt13_coco.py'

data_root = 'data/demo/coco/'
classes = ('circle', 'square', 'triangle')
image_scale = (128, 128)

model = dict(
    # From scratch: the demo needs no download. No stochastic depth: 400 steps underfit, they
    # do not overfit.
    # From scratch there are no ImageNet BatchNorm statistics to keep: BN trains (norm_eval).
    backbone=dict(init_cfg=None, drop_path_rate=0., norm_eval=False),
    roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                  mask_head=dict(num_classes=len(classes))),
    # A 128px image holds at most three objects: far fewer proposals and sampled RoIs do, and
    # the RoI heads' cost grows with their number, not with the image.
    train_cfg=dict(rpn_proposal=dict(nms_pre=300, max_per_img=100),
                   rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=100), rcnn=dict(max_per_img=20)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=4, num_workers=1,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4, num_workers=1,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_epochs = 10
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[9],
         gamma=0.1),
]
# A low LR, not a high one: the FPN and the RoI heads have no normalisation, and larger AdamW
# steps blow up their activations until nearly all ReLUs of the box head's second FC layer
# are dead, so it outputs the class prior (measured after 160 iterations at batch 4: lr 5e-4
# left 0.4% alive and called every ground-truth box background; 1e-4 and 5e-5 did better;
# over 400 iterations 5e-5 still plateaued with a rising box-head loss).
# Clipping guards against the early spikes of a randomly initialised model.
optim_wrapper = dict(optimizer=dict(lr=2.5e-5), clip_grad=dict(max_norm=10))
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1),
    # Pictures of predictions (`tools/test.py --show-dir`) show only confident boxes.
    visualization=dict(score_thr=0.5))
