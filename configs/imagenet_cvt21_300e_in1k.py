# CvT-21 ImageNet-1k pretraining: the CvT-13 recipe (see imagenet_cvt13_300e_in1k.py) with the
# deeper arch and weight decay 0.1, as microsoft/CvT experiments/imagenet/cvt/cvt-21-224x224.yaml
# and the paper (Sec. 4.1: "weight decay 0.05 for CvT-13, 0.1 for CvT-21 and CvT-W24").
# The paper reports 82.5 top-1 at 224x224; this config has not been run on ImageNet here.
_base_ = './imagenet_cvt13_300e_in1k.py'

model = dict(backbone=dict(arch='21'))
optim_wrapper = dict(optimizer=dict(weight_decay=0.1))
