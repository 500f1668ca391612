"""MMEngine's default optimizer constructor, with ``norm_decay_mult`` reaching norm layers that
a custom key matched. MMEngine gives such a parameter that key's settings only
(``decay_mult`` 1 by default), so Mask2Former's ``'backbone': dict(lr_mult=0.1)`` decays every
backbone norm; MMDetection's Swin configs list each norm's name as a key instead. Here a key
that sets ``decay_mult`` keeps it; one that does not gets ``norm_decay_mult`` for norms::

    optim_wrapper = dict(constructor='NormDecayOptimWrapperConstructor', paramwise_cfg=dict(
        norm_decay_mult=0., custom_keys={'backbone': dict(lr_mult=0.1)}))
"""
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

NORMS = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm)  # MMEngine's norms


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class NormDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` whose ``norm_decay_mult`` also applies under a
    custom key without ``decay_mult`` (see the module doc)."""

    def add_params(self, params, module, prefix='', is_dcn_module=None):
        super().add_params(params, module, prefix, is_dcn_module)
        mult, keys = self.paramwise_cfg.get('norm_decay_mult'), \
            self.paramwise_cfg.get('custom_keys', {})
        if prefix or mult is None or self.base_wd is None:
            return  # the top-level call does it once, when every group exists
        ordered = sorted(sorted(keys), key=len, reverse=True)  # MMEngine's: longest first
        groups = {id(g['params'][0]): g for g in params if len(g['params']) == 1}
        for name, norm in module.named_modules():
            for pname, param in norm.named_parameters(recurse=False) \
                    if isinstance(norm, NORMS) else ():
                key = next((k for k in ordered if k in f'{name}.{pname}'), None)
                if key is not None and 'decay_mult' not in keys[key] and id(param) in groups:
                    groups[id(param)]['weight_decay'] = self.base_wd * mult
