# Semantic FPN with CvT-13 on ADE20K: 512x512 crops, 16 images per iteration (2 per GPU x 8
# GPUs), the AdamW 40k recipe of transformer backbones' Semantic FPN results.
_base_ = [
    './_base_/models/sem_fpn_cvt13.py',
    './_base_/datasets/ade20k_bs2.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/schedules/adamw_40k.py',
]
