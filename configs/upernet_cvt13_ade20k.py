# UperNet + auxiliary FCN head with a CvT-13 backbone on ADE20K: 512x512 crops, 160k
# iterations, 16 images per iteration (2 per GPU x 8 GPUs). Recipe as MMSegmentation's Swin
# UperNet: AdamW lr 6e-5, weight decay 0.01, 1500-iteration linear warmup, then poly decay.
_base_ = [
    './_base_/models/upernet_cvt13.py',
    './_base_/datasets/ade20k_bs2.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/schedules/adamw_160k.py',
]
