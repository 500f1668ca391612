# CvT-13 as the backbone of a detection or segmentation model, initialised from the official
# ImageNet-1k file (loaded as published; `tools/misc/download_checkpoints.py` fetches it): what
# every head of ours shares. The head's config adds what it decides: the stages it reads
# (`out_indices`; CvT's three have strides 4/8/16) and the BatchNorm policy (`norm_eval=True`
# for the COCO heads at 2 images per GPU, SyncBN for the ADE20K ones). Inherit this file beside
# the head's model (or the toolbox's whole config of the head) and swap the backbone in:
#
#     _base_ = ['mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py', './_base_/backbones/cvt13.py']
#     model = dict(backbone=dict(_base_.cvt13_backbone, _delete_=True, out_indices=(1, 2)))
#
# The dict has a name of its own because MMEngine refuses a key defined by two files of one
# _base_ list ("Duplicate key is not allowed among bases") and the head's base defines `model`.
# `cvt13_backbone` stays in the resolved config as a top-level entry that no runner, toolbox or
# tool reads: change the model's backbone through `model.backbone` (also on the command line:
# `--cfg-options model.backbone.drop_path_rate=0.2`), not through it. CvT-21 is the same with
# arch='21' and its own file: the *_cvt21_* configs are that delta on their CvT-13 config.
pretrained = 'checkpoints/CvT-13-224x224-IN-1k.pth'
cvt13_backbone = dict(
    type='CvT',
    arch='13',
    # A LayerNorm on each output, as Swin/PVT give their dense-prediction outputs.
    out_norm_cfg=dict(type='LN'),
    num_classes=0,  # no classification stage
    drop_path_rate=0.1,
    init_cfg=dict(type='Pretrained', checkpoint=pretrained))
