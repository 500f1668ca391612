# MMDetection's Mask R-CNN + FPN with a CvT-13 backbone (../backbones/cvt13.py: the official
# ImageNet-1k file, loaded as published).
_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py', '../backbones/cvt13.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

model = dict(
    # BatchNorm at 2 images per GPU: keep the ImageNet statistics (the BN affine
    # parameters still train), as MMDetection does for its BN backbones (ResNet, RegNet,
    # HRNet). Statistics of 2 images are noisy and differ between training and testing;
    # SyncBN would cost two all-reduces per BN layer per step to re-estimate statistics
    # that a 1x fine-tuning barely moves.
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2), norm_eval=True),
    # CvT has three stages (strides 4, 8, 16). FPN turns them into P2-P4 and adds P5 (stride
    # 32) and P6 (stride 64) with stride-2 3x3 convs: P5 is computed from C4 itself
    # ('on_input'), so the level that the RoI extractor uses for large objects is learned
    # from the richest backbone features rather than max-pooled from P4, and a ReLU sits
    # between the two extra convs so that P6 is not just a linear function of P5. The
    # detector then sees MMDetection's standard five levels: RPN anchor strides
    # [4, 8, 16, 32, 64] and RoI featmap_strides [4, 8, 16, 32] stay as in the base config.
    neck=dict(
        in_channels=[64, 192, 384],
        num_outs=5,
        add_extra_convs='on_input',
        relu_before_extra_convs=True))
