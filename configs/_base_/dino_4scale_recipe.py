# What our DINO configs add to MMDetection's dino/dino-4scale_r50_8xb2-12e_coco.py (model,
# multi-scale crop training, AdamW lr 1e-4 / weight decay 1e-4, backbone at 0.1x the LR,
# gradients clipped at 0.1, LR x0.1 after epoch 11, 16 images per iteration), whatever the
# backbone. A config inherits it beside its backbone (backbones/) and adds the levels:
#
#     _base_ = ['./_base_/dino_4scale_recipe.py', './_base_/backbones/cvt13.py']
#     model = dict(backbone=dict(_base_.cvt13_backbone, _delete_=True, ...), neck=dict(...))
_base_ = 'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py'
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

# The backbone trains at 0.1x the LR (DINO's recipe); CvT's cls token and CMT's relative
# position biases have no weight decay, as in our other recipes (a matching custom key takes
# precedence over 'backbone', so it repeats the backbone's lr_mult).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
