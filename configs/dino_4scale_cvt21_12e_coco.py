# DINO (4 scales) with CvT-21 on COCO, 12 epochs: the CvT-13 recipe with the deeper backbone.
_base_ = './dino_4scale_cvt13_12e_coco.py'

pretrained = 'checkpoints/CvT-21-224x224-IN-1k.pth'
model = dict(
    backbone=dict(arch='21', init_cfg=dict(type='Pretrained', checkpoint=pretrained)))
