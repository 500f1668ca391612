# Semantic FPN with CvT-21 on ADE20K (40k): the CvT-13 recipe with the deeper backbone.
_base_ = './sem_fpn_cvt13_ade20k.py'

pretrained = 'checkpoints/CvT-21-224x224-IN-1k.pth'
model = dict(
    backbone=dict(arch='21', init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
