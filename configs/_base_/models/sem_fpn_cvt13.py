# MMSegmentation's Semantic FPN with a CvT-13 backbone (../backbones/cvt13.py: the official
# ImageNet-1k file), for 512x512 crops and ADE20K's 150 classes.
_base_ = ['mmseg::_base_/models/fpn_r50.py', '../backbones/cvt13.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

data_preprocessor = dict(size=(512, 512))
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    # Drop path 0.1 (backbones/cvt13.py), our UperNet's.
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2)),
    # CvT has three stages (strides 4/8/16). FPNHead upsamples and sums whatever levels it is
    # given, so it takes the three real ones, as our UperNet does; a stride-32 level made by a
    # strided conv of C4 would start untrained and add no context, since CvT's last stage
    # already attends over the whole image (measured cost of the alternative:
    # docs/detection_segmentation.md).
    neck=dict(in_channels=[64, 192, 384], num_outs=3),
    decode_head=dict(in_channels=[256, 256, 256], in_index=[0, 1, 2],
                     feature_strides=[4, 8, 16], num_classes=150))

# SyncBN across GPUs for every BatchNorm (backbone and the base's SyncBN head), as our UperNet
# (upernet_cvt13.py); tools/train.py reverts it to BatchNorm on CPUs.
sync_bn = 'torch'
