# Cascade Mask R-CNN + FPN (the Swin/ConvNeXt GIoU box heads) with a CvT-13 backbone
# (../backbones/cvt13.py). The backbone and its levels are those of mask_rcnn_cvt13_fpn.py:
# CvT's three stages (strides 4/8/16) become P2-P4, and P5 (stride 32) and P6 (stride 64) come
# from stride-2 3x3 convs on C4 ('on_input', a ReLU between them), so the RPN anchors keep
# strides 4-64 and the three RoI stages read P2-P5 (strides 4-32).
_base_ = ['./cascade_mask_rcnn_giou_fpn.py', '../backbones/cvt13.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # Drop path 0.1 (backbones/cvt13.py), the rate of our Mask R-CNN: Swin-T and ConvNeXt-T
    # keep their Mask R-CNN rate for Cascade Mask R-CNN too (0.2 and 0.4).
    # BatchNorm at 2 images per GPU: ImageNet statistics kept, as for Mask R-CNN.
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2), norm_eval=True),
    neck=dict(in_channels=[64, 192, 384], num_outs=5, add_extra_convs='on_input',
              relu_before_extra_convs=True))
