# MMDetection's Mask R-CNN + FPN with a CMT-S backbone (../backbones/cmt_s.py: the official
# ImageNet-1k file). CMT has four stages (strides 4-32), so the FPN is MMDetection's standard
# one: P2-P5 from the stages, P6 max-pooled from P5.
_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py', '../backbones/cmt_s.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # BatchNorm at 2 images per GPU (stem, sr convs, IRFFN): keep the ImageNet
    # statistics, as for CvT (see mask_rcnn_cvt13_fpn.py).
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3), norm_eval=True),
    neck=dict(in_channels=[64, 128, 256, 512]))
