# UperNet with CMT-S on ADE20K (160k): the CvT-13 recipe. CMT has four stages (strides
# 4-32), so UPerHead gets the standard four levels with pyramid pooling on the stride-32 one.
_base_ = './upernet_cvt13_ade20k.py'

pretrained = 'checkpoints/cmt_small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='CMT',
        arch='s',
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN'),
        num_classes=0,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 256, 512], in_index=[0, 1, 2, 3]),
    # The stride-16 stage, as for ResNet/Swin UperNets.
    auxiliary_head=dict(in_channels=256, in_index=2))
