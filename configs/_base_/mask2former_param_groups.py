# Mask2Former's parameter groups for our backbones, for the configs on MMDetection's or
# MMSegmentation's Mask2Former base: the base's backbone at 0.1x the LR (its queries and level
# embeddings without weight decay stay as the base sets them), and without weight decay the
# backbone's norms, CvT's cls token and CMT's relative position biases, as our other recipes.
# The base's 'backbone' key sets decay_mult=1, and MMEngine's default constructor lets a custom
# key override norm_decay_mult, so the backbone's norms were decayed; MMDetection's Swin-T
# Mask2Former zeroes them by listing each norm's name. NormDecayOptimWrapperConstructor
# (cvt_mm.engine.norm_decay) applies norm_decay_mult under a key that sets no decay_mult.
# Named, not `optim_wrapper`: MMEngine refuses a key defined by two files of one _base_ list.
# Use: optim_wrapper = _base_.mask2former_optim_wrapper
mask2former_optim_wrapper = dict(
    constructor='NormDecayOptimWrapperConstructor',
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        custom_keys={
            'backbone': dict(_delete_=True, lr_mult=0.1),
            'cls_token': dict(lr_mult=0.1, decay_mult=0.),
            'relative_pos': dict(lr_mult=0.1, decay_mult=0.),
        }))
