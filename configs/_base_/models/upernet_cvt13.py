# MMSegmentation's UperNet + auxiliary FCN head with a CvT-13 backbone (../backbones/cvt13.py:
# the official ImageNet-1k file), for 512x512 crops and ADE20K's 150 classes.
_base_ = ['mmseg::_base_/models/upernet_r50.py', '../backbones/cvt13.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

data_preprocessor = dict(size=(512, 512))
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(0, 1, 2)),
    # CvT has three stages (strides 4, 8, 16). UPerHead works on any number of levels, so it
    # takes the three real ones and runs its pyramid pooling on the stride-16 map (32x32 for a
    # 512 crop, so pool scales 1/2/3/6 all cover several cells). We add no synthetic
    # stride-32 level: a strided conv of C4 carries no information C4 lacks, would start
    # untrained beside the pretrained backbone, and adaptive pooling does not need it.
    decode_head=dict(in_channels=[64, 192, 384], in_index=[0, 1, 2], pool_scales=(1, 2, 3, 6),
                     num_classes=150),
    # Deep supervision on the stride-16 level, where ResNet/Swin UperNets attach it too.
    auxiliary_head=dict(in_channels=384, in_index=2, num_classes=150))

# BatchNorm at 2 images per GPU: SyncBN over all GPUs (16 images of 512x512), in the backbone
# as in MMSegmentation's own heads: when training is distributed, MMEngine converts every
# BatchNorm of the model (CvT's projections, CMT's stem, sr convs and IRFFN). This is how
# MMSegmentation trains BN backbones: 160k iterations of dense labels move the statistics away
# from ImageNet's. On a CPU-only machine tools/train.py reverts SyncBN to per-process BN.
sync_bn = 'torch'
