# CvT-13 ImageNet-1k pretraining with MMPretrain, following the official recipe:
#   microsoft/CvT experiments/imagenet/cvt/cvt-13-224x224.yaml, launched as
#   `bash run.sh -g 8 -t train --cfg ...` (README), and the paper (Sec. 4.1: total batch 2048,
#   300 epochs): AdamW with LR 0.00025 per GPU scaled by the GPU count (TRAIN.SCALE_LR,
#   lib/config/default.py) = 2e-3 on 8 GPUs x 256, weight decay 0.05, timm cosine schedule with
#   5 warm-up epochs from 1e-6 and min LR 1e-5; timm augmentation (bicubic RandomResizedCrop +
#   flip, RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25 pixel mode), Mixup 0.8 /
#   CutMix 1.0, label smoothing 0.1, stochastic depth 0 / 0 / 0.1, no EMA, no gradient
#   clipping, AMP (here: tools/train.py --amp).
#   Test: resize the short side to 224 / 0.875 = 256 (bicubic), center crop 224.
#   No weight decay on BatchNorm, LayerNorm and biases (WITHOUT_WD_LIST ['bn', 'bias', 'ln'],
#   lib/optim/build.py) nor on the cls token (the model's no_weight_decay()).
# The paper reports 81.6 top-1 at 224x224; this config has not been run on ImageNet here.
_base_ = './_base_/imagenet_timm_recipe.py'

model = dict(
    backbone=dict(type='CvT', arch='13', out_type='logits',
                  num_classes={{_base_.num_classes}}, drop_path_rate=0.1))

train_dataloader = dict(batch_size=256)
val_dataloader = dict(batch_size=64)
test_dataloader = val_dataloader

base_lr = 2e-3
optim_wrapper = dict(
    optimizer=dict(lr=base_lr, weight_decay=0.05),
    paramwise_cfg=dict(custom_keys={'.cls_token': dict(decay_mult=0.0)}))

warmup_epochs = 5
max_epochs = 300
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / base_lr, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs,
         end=max_epochs, T_max=max_epochs - warmup_epochs, convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs)

# The official total batch; `tools/train.py --auto-scale-lr` rescales base_lr linearly to yours.
auto_scale_lr = dict(base_batch_size=2048)
