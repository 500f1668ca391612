# What our Mask2Former COCO instance-segmentation configs add to MMDetection's
# mask2former/mask2former_r50_8xb2-lsj-50e_coco.py (large-scale jitter at 1024x1024, 50 epochs
# as 368,750 iterations of 16 images, AdamW lr 1e-4 / weight decay 0.05, backbone at 0.1x the
# LR, gradients clipped at 0.01), whatever the backbone. A config inherits it beside its
# backbone (backbones/) and adds the levels, as dino_4scale_recipe.py shows.
_base_ = 'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py'
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

# MMDetection's instance config keeps its panoptic base's seg folder (annotations/panoptic_*),
# which instance segmentation never reads; data checks would ask for it.
train_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='train2017/')))
val_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='val2017/')))
test_dataloader = val_dataloader
# The base's parameter groups (backbone at 0.1x the LR; queries and level embeddings, norms
# without weight decay), and CvT's cls token and CMT's relative position biases without weight
# decay at the backbone's LR.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'cls_token': dict(lr_mult=0.1, decay_mult=0.),
    'relative_pos': dict(lr_mult=0.1, decay_mult=0.)}))
