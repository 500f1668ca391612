# Mask2Former with CvT-13 for ADE20K semantic segmentation: MMSegmentation's
# mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py (512x512 crops, 160k iterations of
# 16 images, AdamW lr 1e-4 / weight decay 0.05, backbone at 0.1x the LR, gradients clipped at
# 0.01, poly decay) with the CvT-13 backbone, as its Swin-T config swaps in Swin.
_base_ = [
    'mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
    './_base_/backbones/cvt13.py',
    './_base_/training_guards.py',
    './_base_/mask2former_param_groups.py',
]
custom_imports = dict(imports=['mmdet.models', 'cvt_mm'], allow_failed_imports=False)
train_cfg = dict(type='ResumableIterBasedTrainLoop')  # resumable mid-epoch (cvt_mm.engine.runner)

model = dict(
    # Drop path 0.1 (_base_/backbones/cvt13.py), our UperNet's (Swin-T: 0.3 for both UperNet
    # and Mask2Former).
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2)),
    # The three stages and a stride-32 level by a stride-2 conv on C4, as in
    # mask2former_cvt13_coco.py: the head's deformable encoder and masked-attention decoder
    # keep their three levels (strides 8/16/32). MMDetection's ChannelMapper, which
    # MMSegmentation's Mask2Former already imports.
    neck=dict(type='mmdet.ChannelMapper', in_channels=[64, 192, 384], kernel_size=1,
              out_channels=256, act_cfg=None, norm_cfg=dict(type='GN', num_groups=32),
              num_outs=4),
    decode_head=dict(in_channels=[256, 256, 256, 256], strides=[4, 8, 16, 32]))
# SyncBN across GPUs for the backbone's BatchNorms, as our UperNet (upernet_cvt13.py): 160k
# iterations of dense labels re-estimate the statistics (tools/train.py reverts it on CPUs).
sync_bn = 'torch'
optim_wrapper = _base_.mask2former_optim_wrapper  # (_base_/mask2former_param_groups.py)
