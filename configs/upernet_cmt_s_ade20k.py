# UperNet + auxiliary FCN head with CMT-S on ADE20K (160k): the recipe of
# upernet_cvt13_ade20k.py.
_base_ = [
    './_base_/models/upernet_cmt_s.py',
    './_base_/datasets/ade20k_bs2.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/schedules/adamw_160k.py',
]
