# What our Mask2Former ADE20K configs add to MMSegmentation's
# mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py (512x512 crops, 160k iterations of
# 16 images, AdamW lr 1e-4 / weight decay 0.05, backbone at 0.1x the LR, gradients clipped at
# 0.01, poly decay), whatever the backbone. A config inherits it beside its backbone
# (backbones/) and adds the levels, as dino_4scale_recipe.py shows.
_base_ = 'mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py'
# MMSegmentation's Mask2Former imports MMDetection's models (its base names them); and ours.
custom_imports = dict(imports=['mmdet.models', 'cvt_mm'], allow_failed_imports=False)

# SyncBN across GPUs for the backbone's BatchNorms, as our UperNet (models/upernet_cvt13.py):
# 160k iterations of dense labels re-estimate the statistics (tools/train.py reverts it on
# CPUs).
sync_bn = 'torch'
# CvT's cls token and CMT's relative position biases without weight decay, at the backbone's
# 0.1x LR.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
