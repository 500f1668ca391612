# Opt-in layer-wise learning-rate decay for fine-tuning: each backbone layer's LR is
# lr * 0.9 ** (distance from the top), the stem's the smallest; the neck and heads keep the full
# LR. The other settings (norm/cls_token/relative_pos without weight decay) carry over.
_base_ = './mask_rcnn_cvt13_coco.py'

optim_wrapper = dict(
    constructor='BackboneLayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(layer_decay_rate=0.9))
