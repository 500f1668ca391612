# Mask2Former with CvT-13 for ADE20K semantic segmentation: MMSegmentation's
# mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py with our recipe's additions
# (_base_/mask2former_ade20k_recipe.py: its 512x512 crops, 160k iterations, AdamW and 0.1x
# backbone LR; SyncBN) and the CvT-13 backbone, as its Swin-T config swaps in Swin.
_base_ = ['./_base_/mask2former_ade20k_recipe.py', './_base_/backbones/cvt13.py']

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
