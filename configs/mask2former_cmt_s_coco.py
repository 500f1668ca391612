# Mask2Former with CMT-S for COCO instance segmentation: MMDetection's
# mask2former/mask2former_r50_8xb2-lsj-50e_coco.py with the CMT-S backbone, whose four stages
# (strides 4-32) are exactly the levels the head reads (no neck). Recipe as
# mask2former_cvt13_coco.py (_base_/mask2former_coco_recipe.py).
_base_ = ['./_base_/mask2former_coco_recipe.py', './_base_/backbones/cmt_s.py']

model = dict(
    # BatchNorm at 2 images per GPU, as the base's R-50.
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3), norm_eval=True),
    panoptic_head=dict(in_channels=[64, 128, 256, 512]))
