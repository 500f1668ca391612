# Cascade Mask R-CNN + FPN (the Swin/ConvNeXt GIoU box heads) with a CMT-S backbone
# (../backbones/cmt_s.py). CMT's four stages (strides 4-32) are the base model's C2-C5:
# MMDetection's standard FPN, P6 max-pooled from P5.
_base_ = ['./cascade_mask_rcnn_giou_fpn.py', '../backbones/cmt_s.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # BatchNorm at 2 images per GPU: ImageNet statistics kept, as mask_rcnn_cmt_s_fpn.py.
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3), norm_eval=True),
    neck=dict(in_channels=[64, 128, 256, 512]))
