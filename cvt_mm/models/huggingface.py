"""CvT and CMT as Hugging Face transformers backbones: a config + model pair per family
(:class:`CvTBackboneConfig` / :class:`CvTBackbone`, :class:`CMTBackboneConfig` /
:class:`CMTBackbone`) with transformers' ``BackboneMixin``, registered with ``AutoConfig`` and
``AutoBackbone`` when this module is imported (``import cvt_mm`` does, where transformers is
installed). Heads that build their backbone from a config (UperNet, Mask2Former, DPT, the DETR
family, ...) take them as ``backbone_config``.

Each backbone holds the family's model (:class:`~.cvt.CvTModel`, :class:`~.cmt.CMTModel`)
under ``backbone``, without its classification stage, and returns the maps of
``config.out_features`` (stage names ``stage1``, ... ``stageN``; the default, as for every
transformers backbone, is the last stage). A folder written by
``tools/misc/export_pretrained.py`` holds the weights without the prefix;
``from_pretrained`` adds it, as it does for a base model's weights. Hugging Face's own
``microsoft/cvt-*`` folders load into :class:`CvTBackbone` too.

Example::

    >>> import cvt_mm  # registers the backbones
    >>> from transformers import AutoBackbone
    >>> backbone = AutoBackbone.from_pretrained('exported/cvt_13')  # export_pretrained.py
    >>> [tuple(f.shape) for f in backbone(torch.randn(1, 3, 224, 224)).feature_maps]
"""
from __future__ import annotations

import json
from typing import Optional

import torch
import transformers
from transformers import AutoBackbone, AutoConfig, AutoModel, PreTrainedModel
from transformers.modeling_outputs import BackboneOutput

from ..checkpoint.loading import load_pretrained
from . import cmt, cvt

try:  # transformers >= 5
    from transformers.backbone_utils import BackboneConfigMixin, BackboneMixin
except ImportError:  # transformers 4.x
    from transformers.utils.backbone_utils import BackboneConfigMixin, BackboneMixin

try:  # the initialisers that leave loaded tensors alone (transformers >= 5)
    from transformers import initialization as hf_init
except ImportError:
    hf_init = torch.nn.init

PreTrainedConfig = getattr(transformers, 'PreTrainedConfig', None) or transformers.PretrainedConfig

__all__ = ['CvTBackboneConfig', 'CvTBackbone', 'CMTBackboneConfig', 'CMTBackbone']


class _BackboneConfig(BackboneConfigMixin, PreTrainedConfig):
    """What the family's model is built from, and transformers' backbone outputs.

    Args:
        arch (str | dict): a row of the family's arch table or a custom arch dict.
        num_channels (int): image channels. Default 3.
        drop_path_rate (float): as the family's model.
        fast_paths (bool, optional): as the family's model. Default None.
        model_kwargs (dict, optional): further arguments of the family's model (CMT's
            ``pretrain_img_size``, ``selective_cp``). Default None.
        out_features (list[str], optional): stages whose maps the backbone returns, from
            ``stage_names`` (``stage1`` ... ``stageN``). Default: the last.
        out_indices (list[int], optional): the same as indices into ``stage_names``.
    """
    model_cls: type = None
    default_arch = ''

    def __init__(self, arch=None, num_channels: int = 3, drop_path_rate: float = 0.1,
                 fast_paths: Optional[bool] = None, model_kwargs: Optional[dict] = None,
                 out_features=None, out_indices=None, **kwargs):
        self.arch = self.default_arch if arch is None else arch
        self.num_channels = num_channels
        self.drop_path_rate = drop_path_rate
        self.fast_paths = fast_paths
        self.model_kwargs = dict(model_kwargs or {})
        self.stage_names = [f'stage{i}' for i in range(1, self.model_cls.num_stages + 1)]
        super().__init__(**kwargs)
        self.set_output_features_output_indices(out_features=out_features,
                                                out_indices=out_indices)


class _Backbone(BackboneMixin, PreTrainedModel):
    main_input_name = 'pixel_values'
    base_model_prefix = 'backbone'
    has_attentions = False
    supports_gradient_checkpointing = True
    # A whole model's weights (export_pretrained.py writes them with the ImageNet head, which
    # timm uses): its classification stage is not a backbone's.
    _keys_to_ignore_on_load_unexpected = [r'^(?:backbone\.)?(?:head|norm|cls_proj)\.']
    init_weights_official = None

    def __init__(self, config: _BackboneConfig):
        super().__init__(config)
        model = self.config_class.model_cls(
            config.arch, in_chans=config.num_channels, num_classes=0,
            drop_path_rate=config.drop_path_rate, fast_paths=config.fast_paths,
            **config.model_kwargs)
        model.prune_intermediate_layers(None, prune_norm=True, prune_head=True)
        self.backbone = model
        self.num_features = [info['num_chs'] for info in model.feature_info]
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        type(self).init_weights_official(module, init=hf_init)

    def _set_gradient_checkpointing(self, enable: bool = True, *args, **kwargs) -> None:
        self.backbone.set_grad_checkpointing(enable)

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: Optional[bool] = None,
                output_attentions: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs):
        """``BackboneOutput(feature_maps=...)``: the NCHW maps of ``out_features``;
        ``hidden_states`` (with ``output_hidden_states``) the maps of every stage."""
        if output_attentions:
            raise ValueError(f'{type(self).__name__} does not return attention maps '
                             '(output_attentions=True is not supported)')
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if output_hidden_states:
            maps = self.backbone.forward_intermediates(pixel_values, intermediates_only=True)
            hidden_states = tuple(m.contiguous() for m in maps)
            feature_maps = tuple(hidden_states[i] for i in self.out_indices)
        else:
            maps = self.backbone.forward_intermediates(pixel_values, indices=self.out_indices,
                                                       intermediates_only=True)
            feature_maps, hidden_states = tuple(m.contiguous() for m in maps), None
        if not return_dict:
            return (feature_maps, ) + ((hidden_states, ) if output_hidden_states else ())
        return BackboneOutput(feature_maps=feature_maps, hidden_states=hidden_states)


# ------------------------------------------------------------------------------------- CvT
class CvTBackboneConfig(_BackboneConfig):
    """The config of :class:`CvTBackbone` (see :class:`_BackboneConfig`); ``arch`` one of
    ``'13'``, ``'21'``, ``'w24'`` or a dict, as :class:`~.cvt.CvTModel`.

    Example::

        >>> config = CvTBackboneConfig(arch='13', out_features=['stage1', 'stage2', 'stage3'])
    """
    model_type = 'cvt_mm_cvt'
    model_cls = cvt.CvTModel
    default_arch = '13'

    def __init__(self, **kwargs):  # its own: transformers >= 5 replaces an inherited one
        super().__init__(**kwargs)


def _arch_of_hf_cvt(hf: dict):
    """Our arch for Hugging Face's ``CvtConfig`` fields: the table's name where one fits."""
    row = dict(embed_dims=list(hf['embed_dim']), num_heads=list(hf['num_heads']),
               depths=list(hf['depth']))
    return next((name for name, spec in cvt.ARCH_SETTINGS.items() if spec == row), row)


class CvTBackbone(_Backbone):
    """CvT as a transformers backbone: :class:`~.cvt.CvTModel` without its classification
    stage, returning the maps (strides 4, 8, 16) of ``config.out_features``.

    Example::

        >>> backbone = CvTBackbone(CvTBackboneConfig(out_indices=[0, 1, 2])).eval()
        >>> [tuple(f.shape) for f in backbone(torch.randn(1, 3, 224, 224)).feature_maps]
        [(1, 64, 56, 56), (1, 192, 28, 28), (1, 384, 14, 14)]
    """
    config_class = CvTBackboneConfig
    init_weights_official = staticmethod(cvt.init_weights_official)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' ``from_pretrained``; a folder (or Hub id) of Hugging Face's own CvT
        (``microsoft/cvt-13``, ``CvtConfig``, ``model_type`` ``cvt``) loads too, its weights
        renamed by our CvT layouts; ``out_features``/``out_indices`` may be given then."""
        hf = _hf_cvt_config(pretrained_model_name_or_path)
        if hf is None:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        config = CvTBackboneConfig(arch=_arch_of_hf_cvt(hf),
                                   num_channels=hf.get('num_channels', 3),
                                   out_features=kwargs.pop('out_features', None),
                                   out_indices=kwargs.pop('out_indices', None))
        model = cls(config)
        weights = _weights_file(pretrained_model_name_or_path)
        load_pretrained(model.backbone, weights, 'cvt', head_prefixes=('head.', 'norm.'))
        return model.eval()


def _hf_cvt_config(name_or_path) -> Optional[dict]:
    """The ``config.json`` of Hugging Face's own CvT at ``name_or_path``, else None."""
    from transformers.utils import cached_file
    path = cached_file(str(name_or_path), 'config.json',
                       _raise_exceptions_for_missing_entries=False)
    if path is None:
        return None
    with open(path) as f:
        config = json.load(f)
    return config if config.get('model_type') == 'cvt' else None


def _weights_file(name_or_path) -> str:
    from transformers.utils import cached_file
    for filename in ('model.safetensors', 'pytorch_model.bin'):
        path = cached_file(str(name_or_path), filename,
                           _raise_exceptions_for_missing_entries=False)
        if path is not None:
            return path
    raise FileNotFoundError(f'{name_or_path} holds neither model.safetensors nor '
                            'pytorch_model.bin')


# ------------------------------------------------------------------------------------- CMT
class CMTBackboneConfig(_BackboneConfig):
    """The config of :class:`CMTBackbone` (see :class:`_BackboneConfig`); ``arch`` one of
    ``'ti'``, ``'xs'``, ``'s'``, ``'b'`` or a dict, as :class:`~.cmt.CMTModel`.

    Example::

        >>> config = CMTBackboneConfig(arch='s', out_indices=[0, 1, 2, 3])
    """
    model_type = 'cvt_mm_cmt'
    model_cls = cmt.CMTModel
    default_arch = 's'

    def __init__(self, **kwargs):  # its own: transformers >= 5 replaces an inherited one
        super().__init__(**kwargs)


class CMTBackbone(_Backbone):
    """CMT as a transformers backbone: :class:`~.cmt.CMTModel` without its classification
    stage, returning the maps (strides 4, 8, 16, 32) of ``config.out_features``.

    Example::

        >>> backbone = CMTBackbone(CMTBackboneConfig(out_indices=[0, 1, 2, 3])).eval()
        >>> [f.shape[1] for f in backbone(torch.randn(1, 3, 224, 224)).feature_maps]
        [64, 128, 256, 512]
    """
    config_class = CMTBackboneConfig
    init_weights_official = staticmethod(cmt.init_weights_official)


for _config, _model in ((CvTBackboneConfig, CvTBackbone), (CMTBackboneConfig, CMTBackbone)):
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoBackbone.register(_config, _model, exist_ok=True)
    # AutoModel too: transformers 5's AutoBackbone.from_pretrained asks the Hub whether a name is
    # a repository before it looks for a local folder, so local folders load through AutoModel.
    AutoModel.register(_config, _model, exist_ok=True)

# What export_pretrained.py writes into config.json for each family.
CONFIGS = {'cvt': CvTBackboneConfig, 'cmt': CMTBackboneConfig}
