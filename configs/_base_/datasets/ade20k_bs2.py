# MMSegmentation's ADE20K (512x512 crops) at 2 images per GPU: 16 per iteration on 8 GPUs,
# the batch of the Swin UperNet recipe.
_base_ = 'mmseg::_base_/datasets/ade20k.py'

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
