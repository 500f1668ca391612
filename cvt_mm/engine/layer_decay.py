"""Layer-wise learning-rate decay for detectors and segmentors with our backbones.

MMPretrain's ``LearningRateDecayOptimWrapperConstructor`` asks the *model* for
``get_layer_depth``: its classifiers forward the question to the backbone, MMDetection's
detectors and MMSegmentation's segmentors have no such method. This subclass asks the
backbone directly, so every backbone parameter gets ``lr * rate ** (num_layers - 1 - depth)``
by its depth (:func:`cvt_mm.models.backbone.layer_depth`) and the neck and heads the full LR.

Example (a config)::

    optim_wrapper = dict(
        constructor='BackboneLayerDecayOptimWrapperConstructor',
        paramwise_cfg=dict(layer_decay_rate=0.9, norm_decay_mult=0.))

Loaded when a config names the constructor (MMPretrain's engine package loads its and
MMDetection's model zoos), not by ``import cvt_mm``.
"""
from mmpretrain.engine.optimizers import LearningRateDecayOptimWrapperConstructor


class BackboneLayerDecayOptimWrapperConstructor(LearningRateDecayOptimWrapperConstructor):
    """MMPretrain's layer-wise LR decay for any model whose ``backbone`` has
    ``get_layer_depth(param_name, prefix)`` (CvT, CMT, MMPretrain's backbones); raises a
    ``ValueError`` naming the backbone when it has none."""

    def add_params(self, params, module, prefix='', get_layer_depth=None, **kwargs):
        if get_layer_depth is None and prefix == '':
            backbone = getattr(module, 'backbone', None)
            if not hasattr(backbone, 'get_layer_depth'):
                raise ValueError(
                    'BackboneLayerDecayOptimWrapperConstructor needs model.backbone.'
                    f'get_layer_depth; {type(backbone).__name__} has none (CvT and CMT do)')
            get_layer_depth = lambda name: backbone.get_layer_depth(name, 'backbone.')  # noqa: E731
        super().add_params(params, module, prefix=prefix, get_layer_depth=get_layer_depth,
                           **kwargs)
