# CMT-S as the backbone of a detection or segmentation model, initialised from the official
# ImageNet-1k file: what every head of ours shares. The head's config adds the stages it reads
# (`out_indices`; CMT's four have strides 4-32) and the BatchNorm policy (`norm_eval=True` for
# the COCO heads at 2 images per GPU, SyncBN for the ADE20K ones). Use it as
# _base_/backbones/cvt13.py says (`_base_.cmt_s_backbone`; a name of its own, which nothing but
# the configs reads: override `model.backbone`, not it). CMT-Ti/XS/B are the same with
# arch='ti'/'xs'/'b' and their own files: the *_cmt_{ti,xs,b}_* configs are that delta (with
# their stage widths) on their CMT-S config.
pretrained = 'checkpoints/cmt_small.pth'
cmt_s_backbone = dict(
    type='CMT',
    arch='s',
    out_norm_cfg=dict(type='LN'),  # as CvT's (see cvt13.py)
    num_classes=0,  # no classification stage
    selective_cp=True,  # 0.45x the activation memory, same gradients: docs/benchmarks.md
    init_cfg=dict(type='Pretrained', checkpoint=pretrained))
