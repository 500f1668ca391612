# Cascade Mask R-CNN with CvT-21 on COCO, 1x: the CvT-13 recipe with the deeper backbone (same
# stage widths, so the FPN is unchanged).
_base_ = './cascade_mask_rcnn_cvt13_coco.py'

pretrained = 'checkpoints/CvT-21-224x224-IN-1k.pth'
model = dict(
    backbone=dict(arch='21', init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
