"""The OpenMMLab conventions on a model of this package (:class:`PyramidBackbone`), as
MMDetection's Swin and MMPretrain's backbones have them: a tuple of maps for ``out_indices``,
optional output norms, ``frozen_stages``, ``norm_eval``, ``with_cp``, ``init_cfg`` with
``init_weights()`` and ``get_layer_depth`` for layer-wise learning-rate decay.

The models (``CvTModel``, ``CMTModel``) are plain ``torch.nn.Module``\\ s that timm and Hugging
Face wrap as they are; the registered backbones ``CvT`` and ``CMT`` are those models with this
mixin, so the three entry points run the same modules. MMEngine is not needed to build them:
``init_cfg`` follows MMEngine's ``BaseModule`` contract (``init_cfg``, ``init_weights()``,
``is_init``), which is what MMEngine's parents call; only initialisers other than ``Pretrained``
import MMEngine.
"""
from __future__ import annotations

import copy
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..checkpoint.loading import load_pretrained
from ._helpers import check_choice, take_indices
from .layers import nchw_to_nlc, nlc_to_nchw

InitCfg = Optional[Union[dict, List[dict]]]

__all__ = ['PyramidBackbone', 'check_indices', 'check_init_cfg', 'layer_depth']


def check_indices(name: str, indices, num_stages: int) -> tuple:
    """``out_indices`` of an OpenMMLab backbone: an int is one stage, a sequence those stages in
    the order given (negatives count from the end); a ``ValueError`` names the valid range."""
    if indices is None:
        raise ValueError(f'{name} must be an int or a sequence of ints, got None')
    indices = (indices, ) if isinstance(indices, int) else indices
    take_indices(num_stages, indices, name)  # the checks, in timm's convention
    return tuple(int(i) + num_stages if int(i) < 0 else int(i) for i in indices)


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
    return copy.deepcopy(init_cfg)


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


def _check_out_norm_cfg(name: str, out_norm_cfg: Optional[dict]) -> None:
    if out_norm_cfg is None:
        return
    if not isinstance(out_norm_cfg, dict):
        raise ValueError(f'{name}: out_norm_cfg must be None or a dict, got {out_norm_cfg!r}')
    # Applied on the tokens, over channels: only a LayerNorm fits there.
    check_choice("out_norm_cfg['type']", out_norm_cfg.get('type'), ('LN', ))
    unknown = sorted(set(out_norm_cfg) - {'type', 'eps', 'requires_grad'})
    if unknown:
        raise ValueError(f'{name}: out_norm_cfg keys {unknown} are not supported; allowed: '
                         "'type', 'eps', 'requires_grad'")


class PyramidBackbone:
    """OpenMMLab's backbone conventions, mixed into a model of this package (before it in the
    bases: ``class CvT(PyramidBackbone, CvTModel)``).

    The model provides ``num_stages``, ``embed_dims``, ``depths``, ``stages``, ``family``,
    ``arch_zoo``, ``forward_intermediates``, ``forward_features``/``forward_head``,
    ``set_grad_checkpointing``, ``reset_parameters`` (its official initialisation),
    ``stem_modules()`` and ``classification_modules()``; the subclass's ``__init__`` builds the
    model, then calls :meth:`_init_backbone`, whose arguments the backbones ``CvT`` and ``CMT``
    share:

    Args:
        out_indices (int | Sequence[int]): stages whose maps ``forward`` returns, in this
            order (negatives count from the end). Default: every stage.
        out_type (str): ``'featmap'`` (a tuple of NCHW maps) or ``'logits'`` (``(logits,)``,
            for an MMPretrain ``ImageClassifier`` with a loss-only ``ClsHead``). With
            ``'featmap'`` the classification stage and any stage after ``max(out_indices)``
            are kept (for ``classify()`` and checkpoint loading) but frozen, so that every
            trainable parameter gets a gradient, as DDP with ``find_unused_parameters=False``
            needs. Default ``'featmap'``.
        out_norm_cfg (dict, optional): ``None`` returns the official stage outputs;
            ``dict(type='LN')`` adds a LayerNorm per returned map (``out_norms.{stage}``), as
            MMDetection's Swin/PVT do. Default None.
        frozen_stages (int): as ResNet/Swin: -1 trains everything, 0 freezes the stem, ``k``
            the stem and the first ``k`` stages (parameters, BatchNorm statistics, output
            norms); frozen parts stay in eval mode. Default -1.
        norm_eval (bool): keep every BatchNorm in eval mode while training. Default False.
        with_cp (bool): recompute each block's activations in the backward pass instead of
            storing them (training only). Default False.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained', checkpoint=PATH or
            URL[, prefix='backbone.'][, allow_partial=True])`` loads any known layout of the
            family (official, Hugging Face, ours; :func:`cvt_mm.checkpoint.load_pretrained`);
            a checkpoint of another arch is an error naming both, unless ``allow_partial``.
            Other MMEngine init configs are applied as usual; ``None`` is the official
            initialisation. Default None.
    """

    def _init_backbone(self, in_channels: int, out_indices: Union[int, Sequence[int]],
                       out_type: str, out_norm_cfg: Optional[dict], frozen_stages: int,
                       norm_eval: bool, with_cp: bool, init_cfg: InitCfg) -> None:
        name = type(self).__name__
        check_choice('out_type', out_type, ('featmap', 'logits'))
        if out_type == 'logits' and self.num_classes == 0:
            raise ValueError(f"{name}: out_type='logits' needs a head: num_classes must be > 0")
        if not isinstance(frozen_stages, int) or not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'{name}: frozen_stages must be an int in -1..{self.num_stages} '
                             f'(-1: nothing frozen), got {frozen_stages!r}')
        for flag, value in (('norm_eval', norm_eval), ('with_cp', with_cp)):
            if not isinstance(value, bool):
                raise ValueError(f'{name}: {flag} must be True or False, got {value!r}')
        _check_out_norm_cfg(name, out_norm_cfg)
        self.init_cfg = check_init_cfg(init_cfg)
        self._is_init = False
        self.in_channels = in_channels
        self.out_indices = check_indices('out_indices', out_indices, self.num_stages)
        self.out_type = out_type
        self.out_norm_cfg = out_norm_cfg
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.set_grad_checkpointing(with_cp)
        # ``out_norms.{i}``: a LayerNorm per returned map, only for 'featmap' outputs.
        self.out_norms = None
        if out_norm_cfg is not None and out_type == 'featmap':
            cfg = {k: v for k, v in out_norm_cfg.items() if k != 'type'}
            requires_grad = cfg.pop('requires_grad', True)
            self.out_norms = nn.ModuleDict({
                str(i): nn.LayerNorm(self.embed_dims[i], **cfg).requires_grad_(requires_grad)
                for i in self.out_indices})
        self._freeze()

    @property
    def out_channels(self) -> List[int]:
        """Channels of each output: ``embed_dims`` of ``out_indices``, or
        ``[num_classes]`` for ``out_type='logits'``."""
        if self.out_type == 'logits':
            return [self.num_classes]
        return [self.embed_dims[i] for i in self.out_indices]

    # -------------------------------------------------------------------- initialisation
    @property
    def is_init(self) -> bool:
        """Whether :meth:`init_weights` ran (MMEngine's parents then leave the backbone alone)."""
        return self._is_init

    def init_weights(self) -> None:
        """``init_cfg=dict(type='Pretrained', checkpoint=...)``: any known layout of the
        family (official, Hugging Face, ours; a file or an https:// URL) through
        :func:`cvt_mm.checkpoint.load_pretrained`; another ``init_cfg``: MMEngine's
        initialisers; none: the official initialisation of the architecture."""
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            load_pretrained(self, cfg['checkpoint'], self.family, prefix=cfg.get('prefix'),
                            allow_partial=cfg.get('allow_partial', False))
        elif cfg is not None:
            from mmengine.model import initialize
            initialize(self, cfg)
        else:
            self.reset_parameters()
        self._is_init = True

    # -------------------------------------------------------------------- forward
    def classify(self, x: torch.Tensor) -> torch.Tensor:
        """The official ImageNet logits ``(B, num_classes)`` (the classification stage's
        features when ``num_classes=0``): the model's own ``forward``."""
        return self.forward_head(self.forward_features(x))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """``out_type='featmap'``: a tuple of NCHW maps, one per ``out_indices`` in their
        order; ``'logits'``: ``(classify(x), )``."""
        if self.out_type == 'logits':
            return (self.classify(x), )
        maps = self.forward_intermediates(x, indices=self.out_indices, stop_early=True,
                                          intermediates_only=True)
        by_stage = dict(zip(sorted(self.out_indices), maps))
        outs = []
        for i in self.out_indices:
            fmap = by_stage[i]
            if self.out_norms is not None:
                fmap = nlc_to_nchw(self.out_norms[str(i)](nchw_to_nlc(fmap)), fmap.shape[2:])
            outs.append(fmap.contiguous())
        return tuple(outs)

    # -------------------------------------------------------------------- training behaviour
    def _frozen_modules(self) -> List[nn.Module]:
        """What stays in eval mode without gradients: with ``'featmap'`` outputs the
        classification stage and the stages after ``max(out_indices)``, which the forward never
        runs (kept for ``classify()`` and checkpoint loading; DDP with
        ``find_unused_parameters=False`` would wait for their gradients), and with
        ``frozen_stages=k`` the stem and the first ``k`` stages with their output norms."""
        modules = []
        if self.out_type == 'featmap':
            modules += self.classification_modules()
            modules += list(self.stages[max(self.out_indices) + 1:])
        if self.frozen_stages >= 0:
            modules += [*self.stem_modules(), *self.stages[:self.frozen_stages]]
            if self.out_norms is not None:
                modules += [self.out_norms[str(i)] for i in range(self.frozen_stages)
                            if str(i) in self.out_norms]
        return modules

    def _freeze(self) -> None:
        for module in self._frozen_modules():
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True):
        """Train mode, except frozen parts (and every BatchNorm with ``norm_eval``)."""
        super().train(mode)
        self._freeze()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    def get_layer_depth(self, param_name: str, prefix: str = '') -> tuple:
        """``(depth, num_layers)`` of a parameter for layer-wise learning-rate decay
        (MMPretrain's ``LearningRateDecayOptimWrapperConstructor``; for detectors and
        segmentors ``cvt_mm.engine.BackboneLayerDecayOptimWrapperConstructor``). See
        :func:`layer_depth` for the numbering."""
        return layer_depth(param_name, prefix, self.depths)
