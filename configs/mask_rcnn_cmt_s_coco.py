# Mask R-CNN + FPN with CMT-S on COCO, 1x: the same recipe as CvT-13 (AdamW 1e-4 / 0.05,
# 16 images per iteration, steps at epochs 8 and 11). CMT has four stages (strides 4-32), so
# the FPN is MMDetection's standard one: P2-P5 from the stages, P6 max-pooled from P5.
_base_ = './mask_rcnn_cvt13_coco.py'

pretrained = 'checkpoints/cmt_small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CMT',
        arch='s',
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        norm_eval=True,  # the CvT-13 config's BatchNorm policy (stem, sr convs, IRFFN)
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 256, 512], add_extra_convs=False,
              relu_before_extra_convs=False))
