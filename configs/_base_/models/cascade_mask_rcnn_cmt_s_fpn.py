# Cascade Mask R-CNN + FPN (the Swin/ConvNeXt GIoU box heads) with a CMT-S backbone,
# initialised from the official ImageNet-1k file. CMT's four stages (strides 4-32) are the
# base model's C2-C5: MMDetection's standard FPN, P6 max-pooled from P5.
_base_ = './cascade_mask_rcnn_giou_fpn.py'
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
        norm_eval=True,  # as mask_rcnn_cmt_s_fpn.py (2 images per GPU)
        selective_cp=True,  # 0.45x the activation memory, same gradients: docs/benchmarks.md
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 256, 512]))
