"""The registry name of layer-wise learning-rate decay for detectors and segmentors
(:mod:`cvt_mm.engine.layer_decay`), registered without importing MMPretrain: its engine
package loads MMPretrain's and MMDetection's model zoos, which an MMSegmentation user who
never asks for layer decay should not pay for on ``import cvt_mm``."""
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module(name='BackboneLayerDecayOptimWrapperConstructor')
def build_backbone_layer_decay_constructor(optim_wrapper_cfg: dict, paramwise_cfg=None):
    """Build :class:`~cvt_mm.engine.layer_decay.BackboneLayerDecayOptimWrapperConstructor`
    (what ``constructor='BackboneLayerDecayOptimWrapperConstructor'`` in a config's
    ``optim_wrapper`` builds; MMEngine's registries build functions as they build classes).

    Args:
        optim_wrapper_cfg (dict): the ``optim_wrapper`` config.
        paramwise_cfg (dict, optional): ``layer_decay_rate``, ``norm_decay_mult``, ...
            Defaults to None.
    """
    from .layer_decay import BackboneLayerDecayOptimWrapperConstructor
    return BackboneLayerDecayOptimWrapperConstructor(optim_wrapper_cfg, paramwise_cfg)
