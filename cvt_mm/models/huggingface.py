"""CvT and CMT in Hugging Face transformers, as its own models are: per family a config with
the architecture spelled out (:mod:`.huggingface_config`: :class:`CvTConfig`,
:class:`CMTConfig`) and three models, registered with the Auto classes when this module is
imported (``import cvt_mm`` does, where transformers is installed):

===================================  ==============================  ==============================
Auto class                           CvT                             CMT
===================================  ==============================  ==============================
``AutoConfig``                       ``CvTConfig``                   ``CMTConfig``
``AutoModel``                        ``CvTBaseModel``                ``CMTBaseModel``
``AutoModelForImageClassification``  ``CvTForImageClassification``   ``CMTForImageClassification``
``AutoBackbone``                     ``CvTBackbone``                 ``CMTBackbone``
===================================  ==============================  ==============================

Every model holds the family's model (:class:`~.cvt.CvTModel`, :class:`~.cmt.CMTModel`) under
``model``: the base model without the ImageNet head (``last_hidden_state``: the last stage's
map; ``pooler_output``: what the head reads), the classifier with it, the backbone without the
classification stage. Stage names are ``stem`` (CvT: the first convolutional token embedding,
before stage 1's blocks, stride 4; CMT: the convolutional stem, stride 2), ``stage1`` ...
``stageN``. A folder of ``tools/misc/export_pretrained.py`` holds our model's weights without
the prefix; ``from_pretrained`` adds it. Hugging Face's own ``microsoft/cvt-*`` folders
(``CvtConfig``) load into the CvT classes too.

The export tool also writes this module's code into the folder (:mod:`.remote_code`), so that
it loads with ``trust_remote_code=True`` where cvt_mm is not installed.

Example (a folder of ``tools/misc/export_pretrained.py``; each class below has one that
runs without it)::

    import cvt_mm  # registers the classes
    from transformers import AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained('exported/cvt_13')
"""
from __future__ import annotations

import json
from typing import Optional

import torch

from ..compat import require_huggingface

require_huggingface()  # before transformers: say why it cannot be used, where it cannot

from transformers import (
    AutoBackbone,
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers import initialization as hf_init
from transformers.backbone_utils import BackboneMixin
from transformers.modeling_outputs import (
    BackboneOutput,
    BaseModelOutputWithPoolingAndNoAttention,
    ImageClassifierOutputWithNoAttention,
)

from . import cmt, cvt
from .huggingface_config import CMTConfig, CvTConfig
from .layers import nlc_to_nchw, split_tokens

__all__ = ['CvTConfig', 'CvTBaseModel', 'CvTForImageClassification', 'CvTBackbone',
           'CMTConfig', 'CMTBaseModel', 'CMTForImageClassification', 'CMTBackbone',
           'CvTBackboneConfig', 'CMTBackboneConfig', 'AUTO_CLASSES']


class _FamilyModel(PreTrainedModel):
    """What the three models of a family share: the family's model under ``model``, the
    official initialisation, gradient checkpointing, and the forward of the stage maps."""
    main_input_name = 'pixel_values'
    base_model_prefix = 'model'
    input_modalities = ('image', )
    supports_gradient_checkpointing = True
    # What a model leaves out of our weights (export_pretrained.py writes the whole model).
    _keys_to_ignore_on_load_unexpected = [r'^(?:model\.)?head\.']
    prune_classification_stage = False

    def __init__(self, config: PreTrainedConfig):
        super().__init__(config)
        model = self.model_cls(config.model_arch(), in_chans=config.num_channels,
                                 num_classes=self._head_classes(config),
                                 drop_path_rate=config.drop_path_rate)
        if self.prune_classification_stage:
            model.prune_intermediate_layers(None, prune_norm=True, prune_head=True)
        self.model = model

    def _head_classes(self, config) -> int:
        return 0

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        # transformers' init functions leave the tensors that were loaded as they are.
        self.init_weights_official(module, init=hf_init)

    def _set_gradient_checkpointing(self, enable: bool = True, *args, **kwargs) -> None:
        self.model.set_grad_checkpointing(enable)

    def set_fast_paths(self, enable: bool = True) -> None:
        """The fast paths (``True``) or the formulas as written (``False``) for this model,
        whatever ``use_fast_paths()`` said when it was built (the family model's
        ``set_fast_paths``)."""
        self.model.set_fast_paths(enable)

    def stage_maps(self, pixel_values: torch.Tensor, last: int):
        """The maps of ``stage_names[:last + 1]`` (NCHW) and what the model's
        ``forward_head`` reads after the last stage run."""
        return self.pyramid(self.model, pixel_values, last)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' ``from_pretrained``, refusing a folder of another model type (which
        transformers only warns about) with an error naming both."""
        config = kwargs.get('config')
        if not isinstance(config, PreTrainedConfig):
            theirs = _model_type_of(pretrained_model_name_or_path, kwargs)
            if theirs is not None and theirs != cls.config_class.model_type:
                converted = cls._from_other_layout(theirs, pretrained_model_name_or_path,
                                                   kwargs)
                if converted is not None:
                    return converted
                raise ValueError(
                    f'{pretrained_model_name_or_path} holds a {theirs!r} model; '
                    f'{cls.__name__} loads {cls.config_class.model_type!r} folders '
                    f'({cls.config_class.__name__}){cls.other_layouts_hint}')
        wants_info = kwargs.pop('output_loading_info', False)
        model, info = super().from_pretrained(pretrained_model_name_or_path, *args,
                                              output_loading_info=True, **kwargs)
        # transformers re-initialises what a folder lacks; outside a new classification stage,
        # that is another architecture's folder (a config= of another arch, say).
        stage = tuple(f'model.{name}.' for name, module in model.model.named_children()
                      if module in model.model.classification_modules())
        missing = sorted(k for k in info['missing_keys'] if not k.startswith(stage))
        if missing:
            raise ValueError(
                f'{pretrained_model_name_or_path} holds the weights of another architecture: '
                f'{len(missing)} tensors of {cls.__name__}({model.config.model_arch()}) are not '
                f'in it ({", ".join(missing[:3])}, ...); load the folder with its own config '
                '(from_pretrained(folder) without config=)')
        return (model, info) if wants_info else model

    other_layouts_hint = ''

    @classmethod
    def _from_other_layout(cls, model_type, name_or_path, kwargs):
        return None


def _model_type_of(name_or_path, kwargs) -> Optional[str]:
    """The ``model_type`` in ``name_or_path``'s config.json, or None without one."""
    from transformers.utils import cached_file
    path = cached_file(str(name_or_path), 'config.json',
                       _raise_exceptions_for_missing_entries=False,
                       **{k: kwargs[k] for k in ('revision', 'cache_dir', 'token',
                                                 'local_files_only') if k in kwargs})
    if path is None:
        return None
    with open(path) as f:
        return json.load(f).get('model_type')


class _BaseModelMixin:
    """``AutoModel``: the last stage's map, what the head reads, and with
    ``output_hidden_states`` the map of every stage name."""

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: Optional[bool] = None,
                return_dict: Optional[bool] = None, **kwargs):
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        maps, features = self.stage_maps(pixel_values, len(self.config.depths))
        out = BaseModelOutputWithPoolingAndNoAttention(
            last_hidden_state=maps[-1],
            pooler_output=self.model.forward_head(features, pre_logits=True),
            hidden_states=tuple(maps) if output_hidden_states else None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return out if return_dict else out.to_tuple()


class _ClassifierMixin:
    """``AutoModelForImageClassification``: the family's model with its head
    (``config.num_labels`` classes: 1000 for the ImageNet weights)."""

    # The classifier loads the head too.
    _keys_to_ignore_on_load_unexpected = None

    def _head_classes(self, config) -> int:
        return config.num_labels

    def forward(self, pixel_values: torch.Tensor, labels: Optional[torch.Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs):
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        if output_hidden_states:
            maps, features = self.stage_maps(pixel_values, len(self.config.depths))
            logits = self.model.forward_head(features)
        else:
            maps, logits = None, self.model(pixel_values)
        loss = None if labels is None else self.loss_function(labels, logits, self.config)
        out = ImageClassifierOutputWithNoAttention(
            loss=loss, logits=logits, hidden_states=tuple(maps) if maps else None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return out if return_dict else out.to_tuple()


class _BackboneMixin(BackboneMixin):
    """``AutoBackbone``: the maps of ``config.out_features`` (NCHW, contiguous); the model
    without its classification stage, so every parameter is trained."""
    has_attentions = False
    prune_classification_stage = True
    _keys_to_ignore_on_load_unexpected = [r'^(?:model\.)?(?:head|norm|cls_proj)\.']

    def __init__(self, config):
        super().__init__(config)
        self.num_features = self.config.stage_channels()
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: Optional[bool] = None,
                output_attentions: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs):
        """``BackboneOutput(feature_maps=...)``: the maps of ``out_features``;
        ``hidden_states`` (with ``output_hidden_states``) the maps of every stage name."""
        if output_attentions:
            raise ValueError(f'{type(self).__name__} does not return attention maps '
                             '(output_attentions=True is not supported)')
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        last = len(self.stage_names) - 1 if output_hidden_states else max(self.out_indices)
        maps = [m.contiguous() for m in self.stage_maps(pixel_values, last)[0]]
        out = BackboneOutput(feature_maps=tuple(maps[i] for i in self.out_indices),
                             hidden_states=tuple(maps) if output_hidden_states else None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return out if return_dict else out.to_tuple()


# ------------------------------------------------------------------------------------- CvT
def cvt_pyramid(model: cvt.CvTModel, x: torch.Tensor, last: int):
    """The stem map (stage 0's token embedding), the maps of stages 1..``last``, and the last
    stage's normalised tokens (cls token first)."""
    model._check_input(x, max(last - 1, 0))
    maps = []
    for i, stage in enumerate(model.stages[:max(last, 1)]):
        tokens, hw = stage.patch_embed(x)
        if i == 0:
            maps.append(nlc_to_nchw(tokens, hw))
            if last == 0:
                return maps, None
        tokens = stage.forward_tokens(tokens, hw)[0]
        x = nlc_to_nchw(split_tokens(tokens, stage.num_cls_tokens)[1], hw)
        maps.append(x)
    return maps, model.norm(tokens)


class CvTPreTrainedModel(_FamilyModel):
    config_class = CvTConfig
    model_cls = cvt.CvTModel
    pyramid = staticmethod(cvt_pyramid)
    init_weights_official = staticmethod(cvt.init_weights_official)
    other_layouts_hint = " or Hugging Face's own CvT ('cvt', microsoft/cvt-*)"

    @classmethod
    def _from_other_layout(cls, model_type, name_or_path, kwargs):
        if model_type != 'cvt':
            return None
        return load_hugging_face_cvt(cls, name_or_path, kwargs)


def load_hugging_face_cvt(cls, name_or_path, kwargs):
    """A ``microsoft/cvt-*`` folder (or Hub id) into ``cls``: its config read by
    :class:`CvTConfig`, its weights renamed by our CvT layouts."""
    from transformers.utils import cached_file

    from ..checkpoint.loading import load_pretrained
    with open(cached_file(str(name_or_path), 'config.json')) as f:
        theirs = json.load(f)
    theirs.pop('architectures', None)  # CvtForImageClassification: not ours
    config = CvTConfig.from_dict(theirs, **{k: kwargs.pop(k) for k in ('out_features',
                                                                      'out_indices')
                                            if k in kwargs})
    model = cls(config)
    weights = next((p for p in (cached_file(str(name_or_path), name,
                                            _raise_exceptions_for_missing_entries=False)
                                for name in ('model.safetensors', 'pytorch_model.bin')) if p),
                   None)
    if weights is None:
        raise FileNotFoundError(f'{name_or_path} holds neither model.safetensors nor '
                                'pytorch_model.bin')
    load_pretrained(model.model, weights, 'cvt', head_prefixes=('head.', 'norm.'))
    return model.eval()


class CvTBaseModel(_BaseModelMixin, CvTPreTrainedModel):
    """CvT's base model (``AutoModel``): ``last_hidden_state`` the last stage's map (stride
    16), ``pooler_output`` its normalised cls token, ``hidden_states`` the stem's and every
    stage's map.

    Args:
        config (CvTConfig): the architecture.

    Example::

        >>> out = CvTBaseModel(CvTConfig()).eval()(torch.randn(1, 3, 224, 224))
        >>> tuple(out.last_hidden_state.shape), tuple(out.pooler_output.shape)
        ((1, 384, 14, 14), (1, 384))
    """

    def __init__(self, config: CvTConfig):
        super().__init__(config)
        self.post_init()


class CvTForImageClassification(_ClassifierMixin, CvTPreTrainedModel):
    """CvT with its ImageNet head (``AutoModelForImageClassification``): the logits of
    :class:`~.cvt.CvTModel`; ``labels`` give the loss.

    Args:
        config (CvTConfig): the architecture and ``num_labels``.

    Example::

        >>> model = CvTForImageClassification(CvTConfig(num_labels=1000)).eval()
        >>> model(torch.randn(1, 3, 224, 224)).logits.shape
        torch.Size([1, 1000])
    """

    def __init__(self, config: CvTConfig):
        super().__init__(config)
        self.post_init()


class CvTBackbone(_BackboneMixin, CvTPreTrainedModel):
    """CvT as a transformers backbone (``AutoBackbone``): the maps (strides 4, 4, 8, 16) of
    ``config.out_features`` among ``stem``, ``stage1`` ... ``stage3``.

    Args:
        config (CvTConfig): the architecture and ``out_features`` / ``out_indices``.

    Example::

        >>> backbone = CvTBackbone(CvTConfig(out_indices=[1, 2, 3])).eval()
        >>> [tuple(f.shape) for f in backbone(torch.randn(1, 3, 224, 224)).feature_maps]
        [(1, 64, 56, 56), (1, 192, 28, 28), (1, 384, 14, 14)]
    """


# ------------------------------------------------------------------------------------- CMT
def cmt_pyramid(model: cmt.CMTModel, x: torch.Tensor, last: int):
    """The stem's map, the maps of stages 1..``last``, and the last stage's map."""
    model._check_input(x, max(last - 1, 0))
    x = model.stem(x)
    maps = [x]
    for stage in model.stages[:last]:
        x = nlc_to_nchw(*stage(x))
        maps.append(x)
    return maps, x


class CMTPreTrainedModel(_FamilyModel):
    config_class = CMTConfig
    model_cls = cmt.CMTModel
    pyramid = staticmethod(cmt_pyramid)
    init_weights_official = staticmethod(cmt.init_weights_official)


class CMTBaseModel(_BaseModelMixin, CMTPreTrainedModel):
    """CMT's base model (``AutoModel``): ``last_hidden_state`` the last stage's map (stride
    32), ``pooler_output`` the classification stage's pooled features (1280 wide),
    ``hidden_states`` the stem's and every stage's map.

    Args:
        config (CMTConfig): the architecture.

    Example::

        >>> out = CMTBaseModel(CMTConfig()).eval()(torch.randn(1, 3, 224, 224))
        >>> tuple(out.last_hidden_state.shape), tuple(out.pooler_output.shape)
        ((1, 512, 7, 7), (1, 1280))
    """

    def __init__(self, config: CMTConfig):
        super().__init__(config)
        self.post_init()


class CMTForImageClassification(_ClassifierMixin, CMTPreTrainedModel):
    """CMT with its ImageNet classification stage (``AutoModelForImageClassification``).

    Args:
        config (CMTConfig): the architecture and ``num_labels``.

    Example::

        >>> model = CMTForImageClassification(CMTConfig(num_labels=1000)).eval()
        >>> model(torch.randn(1, 3, 224, 224)).logits.shape
        torch.Size([1, 1000])
    """

    def __init__(self, config: CMTConfig):
        super().__init__(config)
        self.post_init()


class CMTBackbone(_BackboneMixin, CMTPreTrainedModel):
    """CMT as a transformers backbone (``AutoBackbone``): the maps (strides 2, 4, 8, 16, 32)
    of ``config.out_features`` among ``stem``, ``stage1`` ... ``stage4``.

    Args:
        config (CMTConfig): the architecture and ``out_features`` / ``out_indices``.

    Example::

        >>> backbone = CMTBackbone(CMTConfig(out_indices=[1, 2, 3, 4])).eval()
        >>> [f.shape[1] for f in backbone(torch.randn(1, 3, 224, 224)).feature_maps]
        [64, 128, 256, 512]
    """


# The names configs and code of earlier releases use.
CvTBackboneConfig = CvTConfig
CMTBackboneConfig = CMTConfig

# ---------------------------------------------------------------------------- registrations
# The export tool writes each family's code and maps (remote_code.py) from this table.
AUTO_CLASSES = {
    'cvt': dict(AutoConfig=CvTConfig, AutoModel=CvTBaseModel, AutoBackbone=CvTBackbone,
                AutoModelForImageClassification=CvTForImageClassification),
    'cmt': dict(AutoConfig=CMTConfig, AutoModel=CMTBaseModel, AutoBackbone=CMTBackbone,
                AutoModelForImageClassification=CMTForImageClassification),
}


def register_auto_classes() -> None:
    """Each family's classes with transformers' Auto classes (idempotent)."""
    autos = dict(AutoModel=AutoModel, AutoBackbone=AutoBackbone,
                 AutoModelForImageClassification=AutoModelForImageClassification)
    for classes in AUTO_CLASSES.values():
        config = classes['AutoConfig']
        AutoConfig.register(config.model_type, config, exist_ok=True)
        for auto, model in classes.items():
            if auto != 'AutoConfig':
                autos[auto].register(config, model, exist_ok=True)


register_auto_classes()
