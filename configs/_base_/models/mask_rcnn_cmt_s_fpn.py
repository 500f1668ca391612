# MMDetection's Mask R-CNN + FPN with a CMT-S backbone, initialised from the official
# ImageNet-1k file. CMT has four stages (strides 4-32), so the FPN is MMDetection's standard
# one: P2-P5 from the stages, P6 max-pooled from P5.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'
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
        # BatchNorm at 2 images per GPU (stem, sr convs, IRFFN): keep the ImageNet
        # statistics, as for CvT (see mask_rcnn_cvt13_fpn.py).
        norm_eval=True,
        selective_cp=True,  # 0.45x the activation memory, same gradients: docs/benchmarks.md
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 256, 512]))
