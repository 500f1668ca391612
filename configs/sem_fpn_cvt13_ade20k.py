# Semantic FPN with CvT-13 on ADE20K: 512x512 crops, 32 images per iteration (4 per GPU x 8
# GPUs), the AdamW 40k recipe of transformer backbones' Semantic FPN results.
_base_ = [
    './_base_/models/sem_fpn_cvt13.py',
    './_base_/datasets/ade20k_bs2.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/schedules/adamw_40k.py',
]
# PVT's batch, 4 images per GPU (32 on 8 GPUs; _base_/schedules/adamw_40k.py).
train_dataloader = dict(batch_size=4)
