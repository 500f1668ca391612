"""MMEngine's default optimizer constructor, with ``norm_decay_mult`` reaching the norm layers
that a custom key matched.

MMEngine's ``DefaultOptimWrapperConstructor`` gives a parameter matched by a custom key that
key's settings and nothing else: ``decay_mult`` defaults to 1 and ``norm_decay_mult`` is not
consulted. So a recipe that scales the backbone's LR with ``custom_keys={'backbone':
dict(lr_mult=0.1)}`` (MMDetection's and MMSegmentation's Mask2Former) decays every backbone
norm, whatever ``norm_decay_mult`` says. MMDetection's Swin configs list each norm's name as a
key of its own; this constructor instead applies ``norm_decay_mult`` to a norm layer's
parameters wherever the key that matched them sets no ``decay_mult``, so the rule holds for
any backbone and depth. A key that sets ``decay_mult`` keeps it.

Example (a config)::

    optim_wrapper = dict(
        constructor='NormDecayOptimWrapperConstructor',
        paramwise_cfg=dict(norm_decay_mult=0.,
                           custom_keys={'backbone': dict(lr_mult=0.1)}))
"""
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

# The layers MMEngine's constructor counts as norms.
NORMS = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm)


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class NormDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` whose ``norm_decay_mult`` also applies to norm
    parameters matched by a custom key without ``decay_mult`` (see the module doc)."""

    def add_params(self, params, module, prefix='', is_dcn_module=None):
        super().add_params(params, module, prefix, is_dcn_module)
        norm_decay_mult = self.paramwise_cfg.get('norm_decay_mult')
        if prefix or norm_decay_mult is None or self.base_wd is None:
            return  # the top-level call does the pass, once every group exists
        keys = self.paramwise_cfg.get('custom_keys', {})
        keys = sorted(sorted(keys), key=len, reverse=True)  # MMEngine's order: longest first
        groups = {id(g['params'][0]): g for g in params if len(g['params']) == 1}
        for name, norm in module.named_modules():
            if not isinstance(norm, NORMS):
                continue
            for pname, param in norm.named_parameters(recurse=False):
                full = f'{name}.{pname}'
                key = next((k for k in keys if k in full), None)
                group = groups.get(id(param))
                if key is not None and group is not None \
                        and 'decay_mult' not in self.paramwise_cfg['custom_keys'][key]:
                    group['weight_decay'] = self.base_wd * norm_decay_mult
