# Mask R-CNN + FPN with CMT-S on COCO, 3x multi-scale-crop schedule (MMDetection's Swin 3x
# recipe): the CvT-13 3x config with the backbone and FPN inputs of mask_rcnn_cmt_s_coco.py.
_base_ = './mask_rcnn_cvt13_ms-3x_coco.py'

pretrained = 'checkpoints/cmt_small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CMT',
        arch='s',
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        norm_eval=True,  # the BatchNorm policy of mask_rcnn_cvt13_coco.py
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 256, 512], add_extra_convs=False,
              relu_before_extra_convs=False))
