"""The configurations of CvT's and CMT's Hugging Face models (:mod:`.huggingface`), as
transformers spells its own: the architecture's fields, the published variants as presets
(``CvTConfig.from_arch('21')``), and the backbone's outputs over the stage names ``stem``,
``stage1`` ... ``stageN``. Configs written by the export tool before the fields existed
(``arch``, ``model_kwargs``) and Hugging Face's own ``CvtConfig`` (``microsoft/cvt-*``) are read
too; an unknown key is an error naming the fields.

Example::

    >>> CvTConfig.from_arch('21', out_features=['stage1', 'stage3']).out_indices
    [1, 3]
"""
from __future__ import annotations

from typing import ClassVar, Optional

from ..compat import require_huggingface

require_huggingface()

from transformers import PreTrainedConfig
from transformers.backbone_utils import BackboneConfigMixin

from . import cmt, cvt
from ._helpers import check_choice

__all__ = ['CvTConfig', 'CMTConfig']

# Keys a config.json may hold besides the architecture's fields: what transformers itself
# writes or passes on loading, what the config derives (written back by ``to_dict``), and
# timm's ``local-dir:`` keys, which the export tool writes into the same file, with the image
# processor's fields (transformers reads the processor from config.json where timm's keys are).
_TRANSFORMERS_KEYS = {'out_features', 'out_indices', 'model_type', 'num_labels', 'torch_dtype',
                      'name_or_path', '_commit_hash', 'output_attentions', 'attn_implementation',
                      'experts_implementation', 'per_layer_config', 'auto_map',
                      'use_pretrained_backbone', 'use_timm_backbone', 'transformers_version',
                      '_name_or_path'}
_PROCESSOR_KEYS = {'image_processor_type', 'size', 'crop_pct', 'resample', 'do_resize',
                   'do_rescale', 'rescale_factor', 'do_normalize', 'image_mean', 'image_std'}
_DERIVED_KEYS = {'stage_names', 'num_hidden_layers', 'hidden_size'}
_TIMM_KEYS = {'architecture', 'num_classes', 'num_features', 'global_pool', 'model_args',
              'pretrained_cfg'}


class _FamilyConfig(BackboneConfigMixin, PreTrainedConfig):
    """What a family's model is built from (the fields of each family's config) and
    transformers' backbone outputs (``out_features`` / ``out_indices`` over
    ``stage_names``). Unknown keys are an error naming the fields; the keys of configs
    written before the fields existed (``arch``, ``model_kwargs``) are still read."""
    # The family's arch table and stage count (class attributes, not dataclass fields).
    arch_zoo: ClassVar[dict] = {}
    num_stages: ClassVar[int] = 0
    # Every family's (transformers' dataclass configs: annotated names are fields).
    num_channels: int = 3
    drop_path_rate: float = 0.1
    _out_features: Optional[list] = None
    _out_indices: Optional[list] = None
    per_stage = ('embed_dims', 'num_heads', 'depths')

    def __post_init__(self, **kwargs):
        self._read_legacy_keys(kwargs)
        unknown = sorted(set(kwargs) - _TRANSFORMERS_KEYS - _DERIVED_KEYS - _TIMM_KEYS
                         - _PROCESSOR_KEYS)
        if unknown:
            raise ValueError(
                f'{type(self).__name__} got unknown fields {unknown}; its fields are '
                f'{self.arch_fields() + ["num_channels", "drop_path_rate"]}, transformers\' '
                'own (id2label, out_features, ...) and timm\'s local-dir keys '
                f'({", ".join(sorted(_TIMM_KEYS))})')
        for key in _DERIVED_KEYS:
            kwargs.pop(key, None)
        for key in self.per_stage:
            values = [int(v) for v in getattr(self, key)] if isinstance(
                getattr(self, key), (list, tuple)) else getattr(self, key)
            if (not isinstance(values, list) or len(values) != self.num_stages
                    or min(values) < 1):
                raise ValueError(f'{type(self).__name__}.{key} must hold '
                                 f'{self.num_stages} positive ints, got {values!r}')
            setattr(self, key, values)
        self.num_hidden_layers = len(self.depths)  # hidden_states: the stem, then each stage
        self.hidden_size = self.embed_dims[-1]
        self.stage_names = ['stem'] + [f'stage{i}' for i in range(1, self.num_stages + 1)]
        self.set_output_features_output_indices(out_indices=kwargs.pop('out_indices', None),
                                                out_features=kwargs.pop('out_features', None))
        super().__post_init__(**kwargs)

    def _read_legacy_keys(self, kwargs: dict) -> None:
        """``arch`` (a row name or a dict) and ``model_kwargs``, as configs written by the
        export tool before the fields existed spell the architecture."""
        arch = kwargs.pop('arch', None)
        kwargs.pop('fast_paths', None)  # was a model option; now the process's switch
        if arch is not None and kwargs.get('out_features') is not None:
            kwargs.pop('out_indices', None)  # counted from stage1 then; the names still hold
        if isinstance(arch, str):
            check_choice('arch', arch, tuple(self.arch_zoo))
            arch = self.arch_zoo[arch]
        for key, value in {**(arch or {}), **(kwargs.pop('model_kwargs', None) or {})}.items():
            if key not in self.arch_fields():
                raise ValueError(f'{type(self).__name__}: arch key {key!r} is not a field; '
                                 f'fields: {self.arch_fields()}')
            setattr(self, key, value)

    @classmethod
    def arch_fields(cls) -> list:
        """The fields that spell the architecture out."""
        return [f for f in cls.__dataclass_fields__ if f in cls.model_arch_defaults()]

    @classmethod
    def model_arch_defaults(cls) -> dict:
        return {}

    @classmethod
    def from_arch(cls, name: str, **kwargs) -> '_FamilyConfig':
        """The config of the published variant ``name`` (a row of the family's arch table),
        ``kwargs`` as the config takes them (``out_features``, ``num_labels``, ...)."""
        check_choice('arch', name, tuple(cls.arch_zoo))
        return cls(**{**cls.arch_zoo[name], **kwargs})

    @property
    def arch_name(self) -> Optional[str]:
        """The name of the arch table's row these fields are, or None for a custom arch."""
        mine = self.model_arch()
        return next((name for name, row in self.arch_zoo.items()
                     if all(mine.get(k) == (list(v) if isinstance(v, tuple) else v)
                            for k, v in {**self.model_arch_defaults(), **row}.items())), None)

    def stage_channels(self) -> list:
        """The channels of each stage name's map."""
        return [self.embed_dims[0]] + list(self.embed_dims)

    def model_arch(self) -> dict:
        """The ``arch`` dict the family's model takes."""
        return {key: getattr(self, key) for key in self.arch_fields()}


class CvTConfig(_FamilyConfig):
    """The configuration of CvT's models (defaults: CvT-13; ``CvTConfig.from_arch('21')``
    for a published variant). The fixed parts of the architecture (token-embedding kernels,
    strides, the cls token in the last stage) are those of :mod:`~.cvt`.

    Args:
        embed_dims (list[int]): width of each of the three stages. Default ``[64, 192, 384]``.
        num_heads (list[int]): attention heads of each stage. Default ``[1, 3, 6]``.
        depths (list[int]): blocks of each stage. Default ``[1, 2, 10]``.
        num_channels (int): image channels. Default 3.
        drop_path_rate (float): stochastic depth of the last stage. Default 0.1.
        out_features, out_indices (list, optional): the backbone's outputs among
            ``stage_names`` (``stem``, ``stage1`` ... ``stage3``). Default: the last.

    Example::

        >>> CvTConfig.from_arch('21', out_indices=[1, 2, 3]).depths
        [1, 4, 16]
    """
    model_type = 'cvt_mm_cvt'
    arch_zoo = cvt.ARCH_SETTINGS
    num_stages = cvt.NUM_STAGES
    embed_dims: list = (64, 192, 384)
    num_heads: list = (1, 3, 6)
    depths: list = (1, 2, 10)

    @classmethod
    def model_arch_defaults(cls) -> dict:
        return dict(embed_dims=None, num_heads=None, depths=None)

    def _read_legacy_keys(self, kwargs: dict) -> None:
        # Hugging Face's own CvtConfig (microsoft/cvt-*): its names, and its fixed parts
        # checked against the architecture ours computes.
        for theirs, ours in _HF_CVT_NAMES.items():
            if theirs in kwargs:
                setattr(self, ours, list(kwargs.pop(theirs)))
        for key in _HF_CVT_UNUSED:
            kwargs.pop(key, None)
        for key, official in _HF_CVT_FIXED.items():
            value = kwargs.pop(key, official)
            if list(value) != official:
                raise ValueError(f'CvtConfig.{key}={value!r} is not the official CvT, which '
                                 f'these models compute ({key}={official})')
        super()._read_legacy_keys(kwargs)


# Hugging Face's CvtConfig: its names of our fields, what it must hold to be the model ours
# computes (its defaults), and what it may hold that ours does not use.
_HF_CVT_NAMES = {'embed_dim': 'embed_dims', 'depth': 'depths'}
_HF_CVT_FIXED = dict(
    patch_sizes=[7, 3, 3], patch_stride=[4, 2, 2], patch_padding=[2, 1, 1],
    mlp_ratio=[4.0, 4.0, 4.0], attention_drop_rate=[0.0, 0.0, 0.0], drop_rate=[0.0, 0.0, 0.0],
    qkv_bias=[True, True, True], cls_token=[False, False, True],
    qkv_projection_method=['dw_bn', 'dw_bn', 'dw_bn'], kernel_qkv=[3, 3, 3],
    padding_kv=[1, 1, 1], stride_kv=[2, 2, 2], padding_q=[1, 1, 1], stride_q=[1, 1, 1])
_HF_CVT_UNUSED = ('initializer_range', 'layer_norm_eps')

class CMTConfig(_FamilyConfig):
    """The configuration of CMT's models (defaults: CMT-S; ``CMTConfig.from_arch('ti')`` for
    a published variant).

    Args:
        embed_dims, num_heads, depths, sr_ratios (list[int]): per stage (four): width,
            attention heads, blocks, key/value reduction. Defaults: CMT-S's.
        stem_channels (int): width of the convolutional stem. Default 32.
        mlp_ratio (float): IRFFN expansion. Default 4.0.
        pretrain_img_size (int | list[int]): the resolution the relative position biases are
            stored for. Default 224.
        head_drop_rate (float): dropout before the ImageNet head. Default 0.1.
        fc_channels (int): width of the classification stage's 1x1 conv. Default 1280.
        num_channels (int): image channels. Default 3.
        drop_path_rate (float): stochastic depth. Default 0.1.
        out_features, out_indices (list, optional): the backbone's outputs among
            ``stage_names`` (``stem``, ``stage1`` ... ``stage4``). Default: the last.

    Example::

        >>> CMTConfig.from_arch('ti').embed_dims
        [46, 92, 184, 368]
    """
    model_type = 'cvt_mm_cmt'
    arch_zoo = cmt.ARCH_SETTINGS
    num_stages = cmt.NUM_STAGES
    per_stage = ('embed_dims', 'num_heads', 'depths', 'sr_ratios')
    embed_dims: list = (64, 128, 256, 512)
    num_heads: list = (1, 2, 4, 8)
    depths: list = (3, 3, 16, 3)
    sr_ratios: list = (8, 4, 2, 1)
    stem_channels: int = 32
    mlp_ratio: float = 4.0
    pretrain_img_size: object = 224
    head_drop_rate: float = 0.1
    fc_channels: int = 1280

    @classmethod
    def model_arch_defaults(cls) -> dict:
        return dict(cmt.ARCH_DEFAULTS, embed_dims=None, depths=None, stem_channels=None)

    def stage_channels(self) -> list:
        return [self.stem_channels] + list(self.embed_dims)

    def model_arch(self) -> dict:
        arch = super().model_arch()
        size = arch['pretrain_img_size']
        arch['pretrain_img_size'] = list(size) if isinstance(size, (list, tuple)) else size
        return arch
