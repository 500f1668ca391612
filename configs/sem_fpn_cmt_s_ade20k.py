# Semantic FPN with CMT-S on ADE20K (40k): the recipe of sem_fpn_cvt13_ade20k.py.
_base_ = [
    './_base_/models/sem_fpn_cmt_s.py',
    './_base_/datasets/ade20k_bs2.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/schedules/adamw_40k.py',
]
# PVT's batch, 4 images per GPU (32 on 8 GPUs; _base_/schedules/adamw_40k.py).
train_dataloader = dict(batch_size=4)
