# Mask2Former with CvT-21 for ADE20K: the CvT-13 recipe with the deeper backbone.
_base_ = './mask2former_cvt13_ade20k.py'

pretrained = 'checkpoints/CvT-21-224x224-IN-1k.pth'
model = dict(
    backbone=dict(arch='21', init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
