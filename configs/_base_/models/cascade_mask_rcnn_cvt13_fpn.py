# Cascade Mask R-CNN + FPN (the Swin/ConvNeXt GIoU box heads) with a CvT-13 backbone,
# initialised from the official ImageNet-1k file. The backbone and its levels are those of
# mask_rcnn_cvt13_fpn.py: CvT's three stages (strides 4/8/16) become P2-P4, and P5 (stride 32)
# and P6 (stride 64) come from stride-2 3x3 convs on C4 ('on_input', a ReLU between them), so
# the RPN anchors keep strides 4-64 and the three RoI stages read P2-P5 (strides 4-32).
_base_ = './cascade_mask_rcnn_giou_fpn.py'
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

pretrained = 'checkpoints/CvT-13-224x224-IN-1k.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CvT',
        arch='13',
        out_indices=(0, 1, 2),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        # The rate of our Mask R-CNN: Swin-T and ConvNeXt-T keep their Mask R-CNN rate for
        # Cascade Mask R-CNN too (0.2 and 0.4).
        drop_path_rate=0.1,
        # BatchNorm at 2 images per GPU: ImageNet statistics kept, as for Mask R-CNN.
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 192, 384], num_outs=5, add_extra_convs='on_input',
              relu_before_extra_convs=True))
