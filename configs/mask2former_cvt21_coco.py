# Mask2Former with CvT-21 for COCO instance segmentation: the CvT-13 recipe with the deeper
# backbone (same stage widths, so the neck is unchanged).
_base_ = './mask2former_cvt13_coco.py'

pretrained = 'checkpoints/CvT-21-224x224-IN-1k.pth'
model = dict(
    backbone=dict(arch='21', init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
