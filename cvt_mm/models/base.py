"""What every backbone of this project shares, in one base class (as MMPretrain's
``BaseBackbone``): argument checks and the arch table (:func:`resolve_arch`),
``out_channels``, output norms, input checks, the ``'featmap'``/``'logits'`` forward,
``frozen_stages`` and ``norm_eval`` (:func:`freeze_modules`, :func:`batchnorm_eval`), the
official initialisation (:func:`vit_init_`), pretrained loading and layer depths for
learning-rate decay (:func:`layer_depth`). A backbone adds its architecture: the stages, the
classification stage and the official initialisation.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..checkpoint.loading import load_pretrained
from .layers import nchw_to_nlc, nlc_to_nchw

InitCfg = Optional[Union[dict, List[dict]]]


def check_choice(name: str, value, allowed) -> None:
    """``ValueError`` naming the option, the bad value and the allowed values."""
    if value not in allowed:
        raise ValueError(f'{name}={value!r} is not supported; allowed: '
                         f'{", ".join(repr(a) for a in allowed)}')


def check_indices(name: str, indices, num_stages: int) -> tuple:
    """Normalise ``out_indices``-style arguments (negatives count from the end)."""
    if isinstance(indices, int):
        indices = (indices, )
    try:
        indices = tuple(int(i) for i in indices)
    except TypeError:
        raise ValueError(f'{name} must be an int or a sequence of ints, got {indices!r}')
    if not indices:
        raise ValueError(f'{name} is empty; name at least one of the stages '
                         f'0..{num_stages - 1}')
    out = []
    for i in indices:
        j = i + num_stages if i < 0 else i
        if not 0 <= j < num_stages:
            raise ValueError(f'{name} contains {i}, but the model has {num_stages} stages '
                             f'(allowed: 0..{num_stages - 1} or -{num_stages}..-1)')
        out.append(j)
    if len(set(out)) != len(out):
        raise ValueError(f'{name}={indices!r} repeats a stage')
    return tuple(out)


def check_batchnorm_statistics(model: nn.Module, batch: int, smallest_map: Sequence[int],
                               where: str, min_side_for_batch_1: int) -> None:
    """BatchNorm in training mode needs more than one value per channel; raise a clear
    ``ValueError`` when ``batch`` images give its smallest normalised map (``where``,
    ``smallest_map`` = (h, w)) only one, instead of PyTorch's error from deep inside."""
    if batch * smallest_map[0] * smallest_map[1] > 1:
        return
    if not any(isinstance(m, _BatchNorm) and m.training for m in model.modules()):
        return
    raise ValueError(
        f'{type(model).__name__} cannot train on a batch of {batch} at this size: {where} is '
        f'{smallest_map[0]}x{smallest_map[1]}, so its BatchNorm sees one value per channel. '
        f'Use a batch of at least 2, inputs of at least {min_side_for_batch_1} pixels on one '
        'side, or norm_eval=True (BatchNorm on its running statistics).')


def unused_by_featmaps(out_type: str, out_indices: Sequence[int], stages: nn.ModuleList,
                       classification: Sequence[Optional[nn.Module]]) -> list:
    """What a backbone's ``'featmap'`` forward never runs: its classification stage and the
    stages after ``max(out_indices)``. Backbones keep them, so ``classify()`` and checkpoint
    loading work, but freeze them: DDP with ``find_unused_parameters=False`` would otherwise
    wait for their gradients and fail at the second iteration."""
    if out_type != 'featmap':
        return []
    return [m for m in classification if m is not None] + list(stages[max(out_indices) + 1:])


def freeze_modules(modules: Sequence[nn.Module]) -> None:
    """``frozen_stages``: eval mode (BatchNorm statistics included) and no gradients."""
    for module in modules:
        module.eval()
        for param in module.parameters():
            param.requires_grad = False


def batchnorm_eval(model: nn.Module) -> None:
    """``norm_eval``: every BatchNorm in eval mode, so its pretrained statistics stay."""
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.eval()


def vit_init_(module: nn.Module, std: float = 0.02) -> None:
    """The ViT initialisation of the official CvT and CMT code: truncated-normal Linear
    weights (``std``) with zero biases, unit-scale zero-shift norms. Convolutions are left
    as they are (PyTorch's default in the official CvT; CMT sets its own, see ``CMT``).

    Example::

        >>> vit_init_(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, _BatchNorm, nn.GroupNorm)):
            if m.weight is not None:
                nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def layer_depth(param_name: str, prefix: str, depths: Sequence[int]) -> tuple:
    """``(depth, num_layers)`` of a backbone parameter for layer-wise learning-rate decay,
    in MMPretrain's ``get_layer_depth`` convention (num_layers = blocks + 2): 0 for the stem
    and the first patch embedding; block ``j`` of stage ``s`` is ``1 + sum(depths[:s]) + j``;
    a later stage's patch embedding sits with the previous stage's last block (as Swin's
    downsampling); a stage's shared tensors (CMT's ``relative_pos``, CvT's ``cls_token``)
    with its first block; everything else (final norm, classifier, output norms, and any
    name outside ``prefix``: necks and heads) is the top, ``num_layers - 1``, at the full LR.

    Example::

        >>> layer_depth('backbone.stages.1.blocks.0.attn.q.weight', 'backbone.', [1, 2, 10])
        (2, 15)
    """
    num_layers = sum(depths) + 2
    if not param_name.startswith(prefix):
        return num_layers - 1, num_layers
    parts = param_name[len(prefix):].split('.')
    if parts[0] == 'stem':
        return 0, num_layers
    if parts[0] != 'stages' or len(parts) < 3:
        return num_layers - 1, num_layers
    stage = int(parts[1])
    before = sum(depths[:stage])
    if parts[2] == 'blocks':
        return 1 + before + int(parts[3]), num_layers
    if parts[2] == 'patch_embed':
        return before, num_layers
    return 1 + before, num_layers


def resolve_arch(arch: Union[str, dict], zoo: Dict[str, dict], num_stages: int,
                 defaults: Optional[dict] = None,
                 required: Sequence[str] = ('embed_dims', 'num_heads', 'depths'),
                 per_stage: Sequence[str] = ('embed_dims', 'num_heads', 'depths')) -> dict:
    """The settings of ``arch``: a row of ``zoo`` by name, or a custom dict checked here
    (as MMPretrain's ``arch_zoo``: a variant is one row, a custom arch is a dict).

    Args:
        arch (str | dict): a key of ``zoo``, or a dict with the ``required`` keys and any of
            ``defaults``' keys.
        zoo (dict): published variants by name.
        num_stages (int): stages of the family: every ``per_stage`` value holds this many.
        defaults (dict, optional): the family's optional settings and their defaults, under
            zoo rows and custom dicts alike. Defaults to None.
        required (Sequence[str]): keys a custom dict must give.
        per_stage (Sequence[str]): keys holding one positive int per stage.

    Returns:
        dict: ``defaults`` updated with the row or the dict (lists copied).

    Example::

        >>> resolve_arch('13', CvT.arch_zoo, 3)['depths']
        [1, 2, 10]
    """
    defaults = dict(defaults or {})
    if isinstance(arch, str):
        check_choice('arch', arch, tuple(zoo))
        arch = zoo[arch]
    elif isinstance(arch, dict):
        allowed = set(required) | set(defaults)
        unknown = sorted(set(arch) - allowed)
        missing = [k for k in required if k not in arch]
        if unknown or missing:
            raise ValueError(f'arch dict: unknown keys {unknown}, missing keys {missing}; '
                             f'required: {list(required)}, optional: '
                             f'{sorted(allowed - set(required))}')
    else:
        raise ValueError(f'arch must be one of {", ".join(map(repr, zoo))} or a dict, '
                         f'got {type(arch).__name__}')
    cfg = {**defaults, **{k: list(v) if isinstance(v, (list, tuple)) else v
                          for k, v in arch.items()}}
    for key in per_stage:
        values = cfg[key]
        if len(values) != num_stages or not all(isinstance(v, int) and v > 0 for v in values):
            raise ValueError(f'arch[{key!r}] must hold {num_stages} positive ints, '
                             f'got {values!r}')
    for i, (dims, heads) in enumerate(zip(cfg['embed_dims'], cfg['num_heads'])):
        if dims % heads:
            raise ValueError(f'arch: stage {i}: embed_dims {dims} is not divisible by '
                             f'num_heads {heads}')
    return cfg


def check_init_cfg(init_cfg: InitCfg) -> InitCfg:
    """``None``, a dict or a list of dicts; ``Pretrained`` only as a single dict with a
    ``checkpoint``, because it is loaded by our loader (any layout, clear errors), which
    MMEngine's ``PretrainedInit`` inside a list would bypass."""
    if init_cfg is None:
        return None
    items = init_cfg if isinstance(init_cfg, list) else [init_cfg]
    if not all(isinstance(item, dict) for item in items):
        raise ValueError(f'init_cfg must be None, a dict or a list of dicts, got {init_cfg!r}')
    pretrained = [item for item in items if item.get('type') == 'Pretrained']
    if pretrained and isinstance(init_cfg, list):
        raise ValueError("init_cfg: give dict(type='Pretrained', checkpoint=PATH) as a single "
                         'dict, not inside a list')
    if pretrained and not pretrained[0].get('checkpoint'):
        raise ValueError("init_cfg=dict(type='Pretrained') needs checkpoint=PATH (a file or an "
                         'https:// URL)')
    return init_cfg


def is_pretrained(init_cfg: InitCfg) -> bool:
    return isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained'


class ConvViTBackbone(BaseModule):
    """Base of :class:`~cvt_mm.models.CvT` and :class:`~cvt_mm.models.CMT`.

    A subclass sets ``family`` (the checkpoint family of :mod:`cvt_mm.checkpoint`),
    ``num_stages``, ``arch_zoo`` and ``min_input_size``, builds ``self.stages`` (an
    ``nn.ModuleList``), ``self.embed_dims`` and ``self.depths``, calls
    :meth:`_build_out_norms` and :meth:`_freeze`, and implements :meth:`_stage_maps`,
    :meth:`_classify`, :meth:`_classification_modules`, :meth:`_stem_modules`,
    :meth:`_official_init` and :meth:`_check_train_batch`.

    Args: see the subclasses; the ones checked here are ``in_channels`` (int > 0),
    ``out_indices`` (stages, negatives from the end), ``out_type`` (``'featmap'`` or
    ``'logits'``), ``out_norm_cfg`` (``None`` or ``dict(type='LN')``), ``num_classes``
    (int >= 0), ``frozen_stages`` (-1..num_stages), ``norm_eval`` and ``with_cp`` (bools) and
    ``init_cfg``.
    """
    family: str = ''
    num_stages: int = 0
    arch_zoo: dict = {}
    min_input_size: int = 32

    def __init__(self, in_channels: int, out_indices: Union[int, Sequence[int]],
                 out_type: str, out_norm_cfg: Optional[dict], num_classes: int,
                 frozen_stages: int, norm_eval: bool, with_cp: bool, init_cfg: InitCfg):
        super().__init__(init_cfg=check_init_cfg(init_cfg))
        name = type(self).__name__
        if not isinstance(in_channels, int) or isinstance(in_channels, bool) or in_channels < 1:
            raise ValueError(f'{name}: in_channels must be a positive int, got {in_channels!r}')
        check_choice('out_type', out_type, ('featmap', 'logits'))
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f'{name}: num_classes must be an int >= 0 (0: no head), '
                             f'got {num_classes!r}')
        if out_type == 'logits' and num_classes == 0:
            raise ValueError(f"{name}: out_type='logits' needs a head: num_classes must be > 0")
        if not isinstance(frozen_stages, int) or not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'{name}: frozen_stages must be an int in -1..{self.num_stages} '
                             f'(-1: nothing frozen), got {frozen_stages!r}')
        for flag, value in (('norm_eval', norm_eval), ('with_cp', with_cp)):
            if not isinstance(value, bool):
                raise ValueError(f'{name}: {flag} must be True or False, got {value!r}')
        if out_norm_cfg is not None:
            if not isinstance(out_norm_cfg, dict):
                raise ValueError(f'{name}: out_norm_cfg must be None or a dict, '
                                 f'got {out_norm_cfg!r}')
            # Applied on the tokens, over channels: only a LayerNorm fits there.
            check_choice("out_norm_cfg['type']", out_norm_cfg.get('type'), ('LN', ))
        self.in_channels = in_channels
        self.out_indices = check_indices('out_indices', out_indices, self.num_stages)
        self.out_type = out_type
        self.out_norm_cfg = out_norm_cfg
        self.num_classes = num_classes
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    # ---------------------------------------------------------------------------------------
    # Building
    # ---------------------------------------------------------------------------------------
    def _build_out_norms(self) -> None:
        """``out_norms.{i}``: a norm per returned map, only for ``'featmap'`` outputs."""
        self.out_norms = None
        if self.out_norm_cfg is not None and self.out_type == 'featmap':
            self.out_norms = nn.ModuleDict({
                str(i): build_norm_layer(self.out_norm_cfg, self.embed_dims[i])[1]
                for i in self.out_indices})

    @property
    def out_channels(self) -> List[int]:
        """Channels of each output: ``embed_dims`` of ``out_indices``, or
        ``[num_classes]`` for ``out_type='logits'``."""
        if self.out_type == 'logits':
            return [self.num_classes]
        return [self.embed_dims[i] for i in self.out_indices]

    # ---------------------------------------------------------------------------------------
    # Initialisation
    # ---------------------------------------------------------------------------------------
    def init_weights(self) -> None:
        """``init_cfg=dict(type='Pretrained', checkpoint=...)``: any known layout of the
        family (official, Hugging Face, ours; a file or an https:// URL) through
        :func:`cvt_mm.checkpoint.load_pretrained`; another ``init_cfg``: MMEngine's
        initialisers; none: the official initialisation of the architecture."""
        if is_pretrained(self.init_cfg):
            load_pretrained(self, self.init_cfg['checkpoint'], self.family,
                            prefix=self.init_cfg.get('prefix'),
                            allow_partial=self.init_cfg.get('allow_partial', False))
        elif self.init_cfg is not None:
            super().init_weights()  # marks the module initialised itself
            return
        else:
            self._official_init()
        # As MMEngine's BaseModule does after initialising: a parent's init_weights() then
        # leaves this module alone instead of initialising it a second time.
        self._is_init = True

    def _official_init(self) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------
    # Forward
    # ---------------------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor, last_stage: int) -> None:
        name = type(self).__name__
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f'{name} expects a (B, C, H, W) tensor, got '
                             f'{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x)}')
        if x.shape[0] == 0:
            raise ValueError(f'{name} got an empty batch (0 images)')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'{name} was built for in_channels={self.in_channels}, '
                             f'got an input with {x.shape[1]} channels')
        if min(x.shape[2:]) < self.min_input_size:
            raise ValueError(f'{name} needs inputs of at least {self.min_input_size}x'
                             f'{self.min_input_size}, got {x.shape[2]}x{x.shape[3]}')
        if self.training:
            self._check_train_batch(x, last_stage)

    def _check_train_batch(self, x: torch.Tensor, last_stage: int) -> None:
        """Raise a clear error where BatchNorm in training mode would see one value per
        channel (see :func:`check_batchnorm_statistics`)."""

    def _stage_maps(self, x: torch.Tensor, last_stage: int) -> List[torch.Tensor]:
        """NCHW maps of stages ``0..last_stage``."""
        raise NotImplementedError

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        """The official ImageNet logits ``(B, num_classes)`` (the classification stage's
        features when ``num_classes=0``)."""
        self._check_input(x, self.num_stages - 1)
        return self._classify(x)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """``out_type='featmap'``: a tuple of NCHW maps, one per ``out_indices``;
        ``'logits'``: ``(classify(x), )``."""
        if self.out_type == 'logits':
            return (self.classify(x), )
        self._check_input(x, max(self.out_indices))
        maps = self._stage_maps(x, max(self.out_indices))
        outs = []
        for i in self.out_indices:
            fmap = maps[i]
            if self.out_norms is not None:
                fmap = nlc_to_nchw(self.out_norms[str(i)](nchw_to_nlc(fmap)), fmap.shape[2:])
            outs.append(fmap.contiguous())
        return tuple(outs)

    # ---------------------------------------------------------------------------------------
    # Training behaviour (as MMDetection's Swin and ResNet)
    # ---------------------------------------------------------------------------------------
    def _classification_modules(self) -> List[Optional[nn.Module]]:
        """The classification stage, which ``'featmap'`` outputs never run."""
        raise NotImplementedError

    def _stem_modules(self) -> List[nn.Module]:
        """What ``frozen_stages=0`` freezes."""
        raise NotImplementedError

    def _frozen_modules(self) -> List[nn.Module]:
        modules = unused_by_featmaps(self.out_type, self.out_indices, self.stages,
                                     self._classification_modules())
        if self.frozen_stages < 0:
            return modules
        modules += [*self._stem_modules(), *self.stages[:self.frozen_stages]]
        if self.out_norms is not None:
            modules += [self.out_norms[str(i)] for i in range(self.frozen_stages)
                        if str(i) in self.out_norms]
        return modules

    def _freeze(self) -> None:
        freeze_modules(self._frozen_modules())

    def train(self, mode: bool = True):
        """Train mode, except frozen parts (and every BatchNorm with ``norm_eval``)."""
        super().train(mode)
        self._freeze()
        if mode and self.norm_eval:
            batchnorm_eval(self)
        return self

    def get_layer_depth(self, param_name: str, prefix: str = '') -> tuple:
        """``(depth, num_layers)`` of a parameter for layer-wise learning-rate decay
        (MMPretrain's ``LearningRateDecayOptimWrapperConstructor``; for detectors and
        segmentors ``cvt_mm.engine.BackboneLayerDecayOptimWrapperConstructor``). See
        :func:`layer_depth` for the numbering."""
        return layer_depth(param_name, prefix, self.depths)
