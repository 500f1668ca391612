# Mask2Former with CMT-S for COCO instance segmentation: MMDetection's
# mask2former/mask2former_r50_8xb2-lsj-50e_coco.py with the CMT-S backbone, whose four stages
# (strides 4-32) are exactly the levels the head reads (no neck). Recipe as
# mask2former_cvt13_coco.py.
_base_ = 'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py'
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

pretrained = 'checkpoints/cmt_small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CMT',
        arch='s',
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        norm_eval=True,  # BatchNorm at 2 images per GPU, as the base's R-50
        selective_cp=True,  # 0.45x the activation memory, same gradients: docs/benchmarks.md
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    panoptic_head=dict(in_channels=[64, 128, 256, 512]),
    init_cfg=None)
# MMDetection's instance config keeps its panoptic base's seg folder (annotations/panoptic_*),
# which instance segmentation never reads; data checks would ask for it.
train_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='train2017/')))
val_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='val2017/')))
test_dataloader = val_dataloader
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
