# Mask2Former with CvT-13 for COCO instance segmentation: MMDetection's
# mask2former/mask2former_r50_8xb2-lsj-50e_coco.py (large-scale jitter at 1024x1024, 50 epochs
# as 368,750 iterations of 16 images, AdamW lr 1e-4 / weight decay 0.05, backbone at 0.1x the
# LR, gradients clipped at 0.01) with the CvT-13 backbone, as its Swin-T config swaps in Swin.
# Panoptic segmentation is left out: its evaluation needs panopticapi
# (docs/detection_segmentation.md).
_base_ = [
    'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py',
    './_base_/backbones/cvt13.py',
    './_base_/training_guards.py',
    './_base_/mask2former_param_groups.py',
]
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableIterBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    # Drop path 0.1 (_base_/backbones/cvt13.py), our UperNet's (Swin-T: 0.3 for both UperNet
    # and Mask2Former).
    # BatchNorm at 2 images per GPU: ImageNet statistics kept, as the base's R-50 and our
    # Mask R-CNN.
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2), norm_eval=True),
    # Mask2Former's pixel decoder runs deformable attention over strides 8/16/32 and its
    # masked-attention decoder cycles through those three levels (9 layers = 3 rounds); the
    # stride-4 map only feeds the mask features. CvT ends at stride 16, so a ChannelMapper maps
    # the three stages to 256 channels (1x1 conv + GN) and adds the stride-32 level by a
    # stride-2 3x3 conv on C4 (+ GN): the head keeps its published three attention levels.
    neck=dict(type='ChannelMapper', in_channels=[64, 192, 384], kernel_size=1,
              out_channels=256, act_cfg=None, norm_cfg=dict(type='GN', num_groups=32),
              num_outs=4),
    panoptic_head=dict(in_channels=[256, 256, 256, 256], strides=[4, 8, 16, 32]),
    init_cfg=None)
# MMDetection's instance config keeps its panoptic base's seg folder (annotations/panoptic_*),
# which instance segmentation never reads; data checks would ask for it.
train_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='train2017/')))
val_dataloader = dict(dataset=dict(data_prefix=dict(_delete_=True, img='val2017/')))
test_dataloader = val_dataloader
optim_wrapper = _base_.mask2former_optim_wrapper  # (_base_/mask2former_param_groups.py)
