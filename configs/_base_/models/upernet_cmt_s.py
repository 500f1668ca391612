# MMSegmentation's UperNet + auxiliary FCN head with a CMT-S backbone (../backbones/cmt_s.py:
# the official ImageNet-1k file). CMT has four stages (strides 4-32), so UPerHead gets the
# standard four levels with pyramid pooling on the stride-32 one.
_base_ = ['mmseg::_base_/models/upernet_r50.py', '../backbones/cmt_s.py']
custom_imports = dict(imports=['cvt_mm'], allow_failed_imports=False)

data_preprocessor = dict(size=(512, 512))
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(_base_.cmt_s_backbone, _delete_=True, out_indices=(0, 1, 2, 3)),
    decode_head=dict(in_channels=[64, 128, 256, 512], in_index=[0, 1, 2, 3],
                     pool_scales=(1, 2, 3, 6), num_classes=150),
    # Deep supervision on the stride-16 stage, as for ResNet/Swin UperNets.
    auxiliary_head=dict(in_channels=256, in_index=2, num_classes=150))

# SyncBN across GPUs for every BatchNorm (stem, sr convs, IRFFN, heads): see upernet_cvt13.py.
sync_bn = 'torch'
