"""CvT: Introducing Convolutions to Vision Transformers (Wu et al., ICCV 2021).

The architecture computes what the official ``microsoft/CvT`` model computes, so the published
ImageNet weights load as they are:

* three stages, each a convolutional token embedding (Conv2d + LayerNorm) and pre-norm blocks;
  no position embedding;
* attention projects q, k and v through a depth-wise 3x3 Conv2d + BatchNorm2d (stride 1 for q,
  2 for k and v) and then a Linear each; scores are scaled by ``embed_dim ** -0.5`` with the
  stage's *full* width, as the official weights were trained;
* a cls token only in the last stage, which bypasses the convolutional projections; the final
  LayerNorm + Linear on it give the ImageNet logits.

In this file: the blocks, the model (:class:`CvTModel`, timm's API: ``forward`` gives logits,
``forward_intermediates`` the pyramid), the OpenMMLab backbone (:class:`CvT`, registered as
``type='CvT'``), the arch table, the checkpoint layouts, and the timm entry points with their
pretrained metadata. Our keys are the official ones with ``stage{i}.`` renamed ``stages.{i}.``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..checkpoint.formats import WeightFormat, has_key_matching, regex_rename, register_format
from ._helpers import (
    batchnorm_trains,
    check_batchnorm_statistics,
    check_choice,
    check_image,
    check_int,
    resolve_arch,
    set_leaf_fast_paths,
    take_indices,
    vit_init_,
)
from ._registry import (
    build_timm_model,
    register_mmengine,
    register_timm,
    timm_checkpoint_filter,
    timm_pretrained_cfg,
)
from .backbone import PyramidBackbone
from .fast import use_fast_paths
from .fast.attention import sdpa_attention
from .fast.quick_gelu import fused_quick_gelu
from .layers import (
    FP32LayerNorm,
    QuickGELU,
    ResidualDropPath,
    merge_heads,
    nchw_to_nlc,
    nlc_to_nchw,
    split_heads,
    split_tokens,
    stochastic_depth_rates,
)
from .recomputation import run_blocks

__all__ = ['CvTModel', 'CvT', 'ARCH_SETTINGS', 'checkpoint_filter_fn', 'cvt_13', 'cvt_21',
           'cvt_w24']

ARCH_SETTINGS = {
    '13': dict(embed_dims=[64, 192, 384], num_heads=[1, 3, 6], depths=[1, 2, 10]),
    '21': dict(embed_dims=[64, 192, 384], num_heads=[1, 3, 6], depths=[1, 4, 16]),
    'w24': dict(embed_dims=[192, 768, 1024], num_heads=[3, 12, 16], depths=[2, 2, 20]),
}
# Token-embedding convolutions of the three stages (kernel, stride, padding).
PATCH_KERNELS = (7, 3, 3)
PATCH_STRIDES = (4, 2, 2)
PATCH_PADDINGS = (2, 1, 1)
NUM_STAGES = 3
MLP_RATIO = 4
# Below this the last stage's map (stride 16) would be a single token or none.
MIN_INPUT_SIZE = 32
# Training a batch of 1 with BatchNorm statistics needs a key/value map of 2 tokens in the
# last stage (stride 2 on the stride-16 map): 35 pixels on one side (see stage_sizes).
MIN_TRAIN_SIDE_BATCH_1 = 35


def stage_sizes(hw: Sequence[int]) -> List[Tuple[int, int]]:
    """(h, w) of each stage's token map for an input of ``hw`` (strides 4, 8, 16)."""
    sizes, (h, w) = [], hw
    for k, st, p in zip(PATCH_KERNELS, PATCH_STRIDES, PATCH_PADDINGS):
        h, w = (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
        sizes.append((h, w))
    return sizes


def check_cvt_input(x: torch.Tensor, owner: str, in_chans: int, last_stage: int,
                    batchnorm_training: bool) -> None:
    """``ValueError`` for a batch ``owner`` (a model's name) cannot take: not a (B, in_chans,
    H, W) batch of at least 32x32 (:func:`~._helpers.check_image`), or, while its BatchNorms
    train, one whose smallest BatchNorm input (stage ``last_stage``'s stride-2 key/value
    projection) has one value per channel. It reads sizes as ints, so timm's fx tracing keeps
    it as one call (registered with timm's notrace functions)."""
    check_image(owner, x, in_chans, MIN_INPUT_SIZE)
    if batchnorm_training:
        kv = [-(-n // 2) for n in stage_sizes(x.shape[2:])[last_stage]]
        check_batchnorm_statistics(owner, x.shape[0], kv, f"stage {last_stage}'s key/value map",
                                   MIN_TRAIN_SIDE_BATCH_1)


# ------------------------------------------------------------------------------------ blocks
class ConvTokenEmbed(nn.Module):
    """Overlapping strided Conv2d, then LayerNorm over channels."""

    def __init__(self, in_channels: int, embed_dims: int, kernel_size: int, stride: int,
                 padding: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dims, kernel_size, stride, padding)
        self.norm = FP32LayerNorm(embed_dims, eps=1e-5)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        x = self.proj(x)
        # One size at a time: proxies under fx, SymInts under export, ints in TorchScript.
        hw = (x.shape[-2], x.shape[-1])
        return self.norm(nchw_to_nlc(x)), hw


class ConvProjection(nn.Module):
    """Depth-wise 3x3 Conv2d (no bias) + BatchNorm2d on the token map, back to tokens."""

    def __init__(self, dims: int, stride: int):
        super().__init__()
        self.conv = nn.Conv2d(dims, dims, 3, stride, padding=1, groups=dims, bias=False)
        self.bn = nn.BatchNorm2d(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nchw_to_nlc(self.bn(self.conv(x)))


class ConvAttention(nn.Module):
    """Multi-head attention over convolutional projections of the token map.

    ``num_cls_tokens`` leading tokens (the cls token) skip the convolutions and are
    concatenated in front of q, k and v after them. ``fast_path`` (read from
    :func:`~.fast.use_fast_paths` when built): the fused ``sdpa_attention`` instead of
    ``softmax(q kᵀ * scale) v`` as written.
    """

    def __init__(self, dims: int, num_heads: int, stride_kv: int = 2):
        super().__init__()
        self.num_heads = num_heads
        # The official model scales by the full width, not the per-head width; the published
        # weights depend on it.
        self.scale = dims ** -0.5
        self.fast_path = use_fast_paths()
        self.conv_proj_q = ConvProjection(dims, stride=1)
        self.conv_proj_k = ConvProjection(dims, stride=stride_kv)
        self.conv_proj_v = ConvProjection(dims, stride=stride_kv)
        self.proj_q = nn.Linear(dims, dims)
        self.proj_k = nn.Linear(dims, dims)
        self.proj_v = nn.Linear(dims, dims)
        self.proj = nn.Linear(dims, dims)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], num_cls_tokens: int) -> torch.Tensor:
        cls_tokens, tokens = split_tokens(x, num_cls_tokens)
        # Without the cls token the map is strided; each of the three convolutions would copy
        # it (and again in its backward), so it is copied once here.
        fmap = nlc_to_nchw(tokens.contiguous(), hw)
        q, k, v = self.conv_proj_q(fmap), self.conv_proj_k(fmap), self.conv_proj_v(fmap)
        if num_cls_tokens:  # (a concatenation with nothing would still copy)
            q = torch.cat([cls_tokens, q], dim=1)
            k = torch.cat([cls_tokens, k], dim=1)
            v = torch.cat([cls_tokens, v], dim=1)
        q = split_heads(self.proj_q(q), self.num_heads)
        k = split_heads(self.proj_k(k), self.num_heads)
        v = split_heads(self.proj_v(v), self.num_heads)
        # TorchScript takes the formula: the fused path's autograd Function is not scriptable.
        if not torch.jit.is_scripting() and self.fast_path:
            x = sdpa_attention(q, k, v, self.scale)
        else:
            x = (torch.matmul(q, k.transpose(-2, -1)) * self.scale).softmax(dim=-1) @ v
        return self.proj(merge_heads(x))


class Mlp(nn.Module):
    """``fc2(QuickGELU(fc1(x)))``, the activation of the official weights. ``fast_path`` (read
    from :func:`~.fast.use_fast_paths` when built): QuickGELU as ``fused_quick_gelu``."""

    def __init__(self, dims: int, hidden_dims: int):
        super().__init__()
        self.fc1 = nn.Linear(dims, hidden_dims)
        self.act = QuickGELU()
        self.fc2 = nn.Linear(hidden_dims, dims)
        self.fast_path = use_fast_paths()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc1(x)
        # TorchScript takes the formula: the fused path's autograd Function is not scriptable.
        if not torch.jit.is_scripting() and self.fast_path:
            return self.fc2(fused_quick_gelu(x))
        return self.fc2(self.act(x))


class CvTBlock(nn.Module):
    """Pre-norm transformer block with convolutional attention."""

    def __init__(self, dims: int, num_heads: int, drop_path: float):
        super().__init__()
        self.norm1 = FP32LayerNorm(dims, eps=1e-5)
        self.attn = ConvAttention(dims, num_heads)
        self.drop_path = ResidualDropPath(drop_path)
        self.norm2 = FP32LayerNorm(dims, eps=1e-5)
        self.mlp = Mlp(dims, dims * MLP_RATIO)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], num_cls_tokens: int) -> torch.Tensor:
        x = self.drop_path(x, self.attn(self.norm1(x), hw, num_cls_tokens))
        return self.drop_path(x, self.mlp(self.norm2(x)))


class CvTStage(nn.Module):
    """Token embedding, optional cls token and blocks: an NCHW map in; the tokens (the cls
    token first) and the map's (h, w) out. ``forward(x)`` is
    ``forward_tokens(*patch_embed(x))``, for a caller that wants the embedded map itself."""

    def __init__(self, index: int, in_channels: int, dims: int, num_heads: int, depth: int,
                 drop_path_rates: Sequence[float], with_cls_token: bool):
        super().__init__()
        self.patch_embed = ConvTokenEmbed(in_channels, dims, PATCH_KERNELS[index],
                                          PATCH_STRIDES[index], PATCH_PADDINGS[index])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dims)) if with_cls_token else None
        self.num_cls_tokens = int(with_cls_token)
        self.blocks = nn.ModuleList(
            CvTBlock(dims, num_heads, drop_path_rates[j]) for j in range(depth))
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        tokens, hw = self.patch_embed(x)
        return self.forward_tokens(tokens, hw)

    def forward_tokens(self, x: torch.Tensor,
                       hw: Tuple[int, int]) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """The stage after its token embedding: ``x`` the (B, h*w, C) tokens of the (h, w) map
        ``patch_embed`` gave; returns the tokens after the blocks (the cls token first) and
        ``hw``."""
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if torch.jit.is_scripting():  # recomputation (run_blocks) is eager-only
            for block in self.blocks:
                x = block(x, hw, self.num_cls_tokens)
            return x, hw
        x = run_blocks(self.blocks, x, hw, self.num_cls_tokens, with_cp=self.grad_checkpointing)
        return x, hw


def stage_drop_path_rates(drop_path_rate, depths: Sequence[int]) -> List[List[float]]:
    """A float is the official recipe (0 / 0 / rate per stage); a sequence gives one rate per
    stage. Within a stage the rate rises linearly from 0, as in the official code."""
    if isinstance(drop_path_rate, (int, float)):
        per_stage = [0.0] * (NUM_STAGES - 1) + [float(drop_path_rate)]
    else:
        per_stage = [float(r) for r in drop_path_rate]
        if len(per_stage) != NUM_STAGES:
            raise ValueError(f'drop_path_rate must be a float or {NUM_STAGES} per-stage rates, '
                             f'got {drop_path_rate!r}')
    if not all(0.0 <= r < 1.0 for r in per_stage):
        raise ValueError(f'drop_path_rate values must be in [0, 1), got {drop_path_rate!r}')
    return [stochastic_depth_rates(r, [d])[0] for r, d in zip(per_stage, depths)]


def init_weights_official(module: nn.Module, init=nn.init) -> None:
    """microsoft/CvT's initialisation of ``module`` itself: ViT's truncated normal for Linear
    layers and the cls token, unit norms; convolutions PyTorch's default. ``init`` as in
    :func:`~._helpers.vit_init_`."""
    vit_init_(module, init=init)
    if isinstance(module, nn.Conv2d):  # nn.Conv2d.reset_parameters, through ``init``
        init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        if module.bias is not None:
            bound = 1 / math.sqrt(module.weight[0].numel())
            init.uniform_(module.bias, -bound, bound)
    elif isinstance(module, CvTStage) and module.cls_token is not None:
        init.trunc_normal_(module.cls_token, std=0.02)


# ------------------------------------------------------------------------------------- model
class CvTModel(nn.Module):
    """CvT as timm's models are: ``forward`` gives the ImageNet logits, ``forward_features`` /
    ``forward_head`` split it, ``forward_intermediates`` gives the stage maps (strides 4, 8, 16)
    at any input size >= 32x32, with ``feature_info``, ``set_grad_checkpointing``,
    ``group_matcher``, ``reset_classifier`` and ``prune_intermediate_layers``. What the timm
    entry points (``cvt_13``, ...), the Hugging Face backbone and the OpenMMLab backbone
    :class:`CvT` run.

    Args:
        arch (str | dict): ``'13'``, ``'21'``, ``'w24'`` (see :attr:`arch_zoo`), or
            ``dict(embed_dims, num_heads, depths)`` with three entries each. Default ``'13'``.
        in_chans (int): image channels. Default 3.
        num_classes (int): classes of the Linear head on the cls token; 0 for none (the
            forward then returns the normalised cls token). Default 1000.
        global_pool (str): ``'token'`` (the cls token, official) or ``''`` (``forward_head``
            returns every normalised token). Default ``'token'``.
        drop_rate (float): dropout before the head (0 in the official recipe). Default 0.
        drop_path_rate (float | Sequence[float]): stochastic depth of the last stage (the
            official recipe: 0 / 0 / 0.1, rising linearly within the stage), or three
            per-stage rates. Default 0.1.
        fast_paths (bool, optional): the fused kernels of :mod:`cvt_mm.models.fast` (``True``)
            or the formulas as written (``False``), set after building by
            :meth:`set_fast_paths`; None leaves each block with what
            :func:`~.fast.use_fast_paths` said when it was built. Default None.

    Example::

        >>> model = CvTModel('13').eval()
        >>> model(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
        >>> [tuple(f.shape) for f in model.forward_intermediates(
        ...     torch.randn(1, 3, 224, 320), intermediates_only=True)]
        [(1, 64, 56, 80), (1, 192, 28, 40), (1, 384, 14, 20)]
    """
    family = 'cvt'
    num_stages = NUM_STAGES
    # Published variants by name (as MMPretrain's arch_zoo); also names checkpoints' archs.
    arch_zoo = ARCH_SETTINGS
    min_input_size = MIN_INPUT_SIZE
    # The convolution that reads the image (timm adapts it to another ``in_chans``).
    first_conv = 'stages.0.patch_embed.proj'

    def __init__(self, arch: Union[str, dict] = '13', in_chans: int = 3, num_classes: int = 1000,
                 global_pool: str = 'token', drop_rate: float = 0.0,
                 drop_path_rate: Union[float, Sequence[float]] = 0.1,
                 fast_paths: Optional[bool] = None):
        super().__init__()
        name = type(self).__name__
        check_int(name, 'in_channels', in_chans, 1)
        check_int(name, 'num_classes', num_classes, 0, ' (0: no head)')
        check_choice('global_pool', global_pool, ('token', ''))
        spec = resolve_arch(arch, ARCH_SETTINGS, NUM_STAGES)
        self.embed_dims = spec['embed_dims']
        self.num_heads = spec['num_heads']
        self.depths = spec['depths']
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.grad_checkpointing = False
        rates = stage_drop_path_rates(drop_path_rate, self.depths)

        self.stages = nn.ModuleList()
        self.feature_info = []
        channels, reduction = in_chans, 1
        for i in range(NUM_STAGES):
            self.stages.append(
                CvTStage(i, channels, self.embed_dims[i], self.num_heads[i], self.depths[i],
                         rates[i], with_cls_token=i == NUM_STAGES - 1))
            channels, reduction = self.embed_dims[i], reduction * PATCH_STRIDES[i]
            self.feature_info.append(dict(num_chs=channels, reduction=reduction,
                                          module=f'stages.{i}'))

        # The classification stage: final norm on the cls token and the ImageNet head.
        self.num_features = self.head_hidden_size = self.embed_dims[-1]
        self.norm = FP32LayerNorm(self.embed_dims[-1], eps=1e-5)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        self.reset_parameters()
        if fast_paths is not None:
            self.set_fast_paths(fast_paths)

    def reset_parameters(self) -> None:
        """The official initialisation (:func:`init_weights_official`)."""
        self.apply(init_weights_official)

    # ----------------------------------------------------------------- timm's model interface
    def stem_modules(self) -> List[nn.Module]:
        """What a frozen stem is: the first token embedding."""
        return [self.stages[0].patch_embed]

    def classification_modules(self) -> List[nn.Module]:
        return [self.norm, self.head]

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        return {f'stages.{i}.cls_token' for i, s in enumerate(self.stages)
                if s.cls_token is not None}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        """Parameter groups in order of depth, for timm's layer-wise LR decay."""
        return dict(stem=r'^stages\.0\.patch_embed', blocks=r'^stages\.(\d+)' if coarse else [
            (r'^stages\.(\d+)\.blocks\.(\d+)', None),
            (r'^stages\.(\d+)\.(?:patch_embed|cls_token)', (0, )),
            (r'^norm', (99999, )),
        ])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass (training only)."""
        self.grad_checkpointing = enable
        for stage in self.stages:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def set_fast_paths(self, enable: bool = True) -> None:
        """Run this model on the fast paths (fused attention and QuickGELU) or, with ``False``,
        on the formulas as written, whatever :func:`~.fast.use_fast_paths` said when it was
        built (:func:`~._helpers.set_leaf_fast_paths`)."""
        set_leaf_fast_paths(self, enable)

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new head for ``num_classes`` (0: none); ``global_pool`` ``'token'`` or ``''``."""
        check_int(type(self).__name__, 'num_classes', num_classes, 0, ' (0: no head)')
        if global_pool is not None:
            check_choice('global_pool', global_pool, ('token', ''))
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()

    def _check_input(self, x: torch.Tensor, last_stage: int) -> None:
        """:func:`check_cvt_input` for an input to stages ``0..last_stage``."""
        check_cvt_input(x, type(self).__name__, self.in_chans, last_stage,
                        self.training and batchnorm_trains(self))

    def forward_intermediates(
            self, x: torch.Tensor, indices: Optional[Union[int, Sequence[int]]] = None,
            norm: bool = False, stop_early: bool = False, output_fmt: str = 'NCHW',
            intermediates_only: bool = False):
        """The maps of the stages ``indices`` names (timm's convention: None all, an int the
        last n, a sequence those; in stage order), NCHW. ``norm`` applies the final norm to
        the last stage's map; ``stop_early`` runs no stage after the last one asked for.
        Returns the maps, or ``(forward_features(x), maps)`` unless ``intermediates_only``."""
        check_choice('output_fmt', output_fmt, ('NCHW', ))
        take, last = take_indices(len(self.stages), indices)
        stages = self.stages[:last + 1] if stop_early or intermediates_only else self.stages
        self._check_input(x, len(stages) - 1)
        intermediates = []
        for i, stage in enumerate(stages):
            tokens, hw = stage(x)
            x = nlc_to_nchw(split_tokens(tokens, stage.num_cls_tokens)[1], hw)
            if i in take:
                if norm and i == NUM_STAGES - 1:
                    intermediates.append(nlc_to_nchw(self.norm(nchw_to_nlc(x)), hw))
                else:
                    intermediates.append(x)
        if intermediates_only:
            return intermediates
        return self.norm(tokens), intermediates

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True) -> List[int]:
        """Drop what ``forward_intermediates(indices)`` does not need (the stages after the
        last index, the head, the final norm); returns the indices, absolute."""
        take, last = take_indices(len(self.stages), indices, name='out_indices')
        pruned_end = last < len(self.stages) - 1
        self.stages = self.stages[:last + 1]
        if pruned_end:
            self.num_features = self.head_hidden_size = self.feature_info[last]['num_chs']
        if prune_norm or pruned_end:
            self.norm = nn.Identity()
        if prune_head or pruned_end:
            self.reset_classifier(0, '')
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's normalised tokens, ``(B, 1 + h*w, C)``, the cls token first."""
        # TorchScript compiles no checks (they format sizes into messages); torch's own
        # errors remain.
        if not torch.jit.is_scripting():
            self._check_input(x, len(self.stages) - 1)
        for stage in self.stages:
            tokens, hw = stage(x)
            x = nlc_to_nchw(split_tokens(tokens, stage.num_cls_tokens)[1], hw)
        return self.norm(tokens)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'token':
            x = x[:, 0]
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    checkpoint_filter = staticmethod(timm_checkpoint_filter)


# ---------------------------------------------------------------------- OpenMMLab backbone
class CvT(PyramidBackbone, CvTModel):
    """CvT backbone for MMDetection, MMSegmentation and MMPretrain: :class:`CvTModel` with
    OpenMMLab's backbone conventions (:class:`~.backbone.PyramidBackbone`). ``forward`` returns
    a tuple of NCHW maps (strides 4, 8, 16); the ImageNet classification stage stays, for
    :meth:`classify` and ``out_type='logits'``.

    Args:
        arch, num_classes, drop_path_rate, fast_paths: as :class:`CvTModel`.
        in_channels (int): image channels (the model's ``in_chans``). Default 3.
        out_indices, out_type, out_norm_cfg, frozen_stages, norm_eval, with_cp, init_cfg:
            OpenMMLab's backbone arguments (:class:`~.backbone.PyramidBackbone`); here the
            stem is stage 0's token embedding.

    Examples:
        >>> import torch
        >>> from cvt_mm.models import CvT
        >>> model = CvT(arch='13', out_norm_cfg=dict(type='LN')).eval()
        >>> [tuple(f.shape) for f in model(torch.randn(1, 3, 224, 320))]
        [(1, 64, 56, 80), (1, 192, 28, 40), (1, 384, 14, 20)]
        >>> model.classify(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
    """

    def __init__(self,
                 arch: Union[str, dict] = '13',
                 in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2),
                 out_type: str = 'featmap',
                 out_norm_cfg: Optional[dict] = None,
                 num_classes: int = 1000,
                 drop_path_rate: Union[float, Sequence[float]] = 0.1,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 fast_paths: Optional[bool] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        CvTModel.__init__(self, arch, in_chans=in_channels, num_classes=num_classes,
                          drop_path_rate=drop_path_rate, fast_paths=fast_paths)
        self._init_backbone(in_channels, out_indices, out_type, out_norm_cfg, frozen_stages,
                            norm_eval, with_cp, init_cfg)


# --------------------------------------------------------------------- checkpoint layouts
# Ours = the official keys with ``stage{i}.`` renamed to ``stages.{i}.``:
#   stages.{i}.patch_embed.proj / .norm           (token embedding: Conv2d, LayerNorm)
#   stages.{i}.blocks.{j}.norm1 / .norm2
#   stages.{i}.blocks.{j}.attn.conv_proj_{q,k,v}.conv / .bn, .attn.proj_{q,k,v}, .attn.proj
#   stages.{i}.blocks.{j}.mlp.fc1 / .fc2
#   stages.2.cls_token, norm, head                (the classification stage)
#   out_norms.{i}                                 (the OpenMMLab backbone's optional norms)
# Hugging Face CvtForImageClassification (``cvt.`` is absent in a bare CvtModel file).
_HF_STAGE = r'^(?:cvt\.)?encoder\.stages\.(\d+)\.'
_HF_BLOCK = _HF_STAGE + r'layers\.(\d+)\.'
HF_RULES = [
    (_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.',
     r'stages.\1.patch_embed.proj.'),
    (_HF_STAGE + r'embedding\.convolution_embeddings\.normalization\.',
     r'stages.\1.patch_embed.norm.'),
    (_HF_STAGE + r'cls_token$', r'stages.\1.cls_token'),
]
for _long, _short in (('query', 'q'), ('key', 'k'), ('value', 'v')):
    _conv = _HF_BLOCK + rf'attention\.attention\.convolution_projection_{_long}\.' \
        r'convolution_projection\.'
    HF_RULES += [
        (_conv + r'convolution\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.conv.'),
        (_conv + r'normalization\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.bn.'),
        (_HF_BLOCK + rf'attention\.attention\.projection_{_long}\.',
         rf'stages.\1.blocks.\2.attn.proj_{_short}.'),
    ]
HF_RULES += [
    (_HF_BLOCK + r'attention\.output\.dense\.', r'stages.\1.blocks.\2.attn.proj.'),
    (_HF_BLOCK + r'layernorm_before\.', r'stages.\1.blocks.\2.norm1.'),
    (_HF_BLOCK + r'layernorm_after\.', r'stages.\1.blocks.\2.norm2.'),
    (_HF_BLOCK + r'intermediate\.dense\.', r'stages.\1.blocks.\2.mlp.fc1.'),
    (_HF_BLOCK + r'output\.dense\.', r'stages.\1.blocks.\2.mlp.fc2.'),
    (r'^layernorm\.', 'norm.'),
    (r'^classifier\.', 'head.'),
]

register_format(WeightFormat(
    'cvt-official', 'cvt', has_key_matching(r'stage0\.patch_embed\.proj\.weight$'),
    lambda sd: regex_rename(sd, [(r'^stage(\d+)\.', r'stages.\1.')]),
    'microsoft/CvT model-zoo .pth (a plain state dict)'))
register_format(WeightFormat(
    'cvt-huggingface', 'cvt',
    has_key_matching(_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.weight$'),
    lambda sd: regex_rename(sd, HF_RULES),
    'Hugging Face transformers CvtForImageClassification / CvtModel'))
register_format(WeightFormat(
    # Keyed on the convolutional projection, which CMT's layout (also `stages.{i}.`) lacks.
    'cvt-ours', 'cvt', has_key_matching(r'stages\.0\.blocks\.0\.attn\.conv_proj_q\.conv\.weight$'),
    dict, "this project's layout (CvTModel().state_dict(), CvT().state_dict())"))

# timm's name for a model's pretrained-weights filter.
checkpoint_filter_fn = timm_checkpoint_filter


# -------------------------------------------------------------------------- timm entry points
def _cfg(checkpoint: str, **kwargs) -> dict:
    # No pool_size: forward_features gives tokens, as timm's ViTs (whose cfgs say None).
    return timm_pretrained_cfg(checkpoint, first_conv=CvTModel.first_conv, **kwargs)


# The official evaluation (microsoft/CvT lib/dataset/transformas/build.py): at 224, the short
# side to 224 / 0.875 then a centre crop; at 384 a plain resize to 384 x 384 (CENTER_CROP
# False in the 384 configs), bicubic both.
_AT_384 = dict(crop_pct=1.0, crop_mode='squash')
PRETRAINED_CFGS = {
    'cvt_13.in1k': _cfg('cvt-13'),
    'cvt_13.in1k_384': _cfg('cvt-13-384', **_AT_384),
    'cvt_13.in22k_ft_in1k_384': _cfg('cvt-13-384-22k', **_AT_384),
    'cvt_21.in1k': _cfg('cvt-21'),
    'cvt_21.in1k_384': _cfg('cvt-21-384', **_AT_384),
    'cvt_21.in22k_ft_in1k_384': _cfg('cvt-21-384-22k', **_AT_384),
    'cvt_w24.in22k_ft_in1k_384': _cfg('cvt-w24-384-22k', **_AT_384),
}


def cvt_13(pretrained: bool = False, **kwargs) -> CvTModel:
    """CvT-13 (20.0 M parameters), ImageNet-1k at 224 (81.6 top-1) or 384 (83.0): timm's
    entry point, ``timm.create_model('cvt_13')`` once ``cvt_mm`` is imported.

    Args:
        pretrained (bool): load the published weights (``cvt_13.in1k``, downloaded once; or
            ``pretrained_cfg_overlay=dict(file=...)``). Default False.
        **kwargs: timm's (``num_classes``, ``features_only``, ``out_indices``, ...) and
            :class:`CvTModel`'s arguments.

    Returns:
        CvTModel: the model (timm's feature wrapper with ``features_only=True``).

    Example::

        >>> import timm
        >>> model = timm.create_model('cvt_13', num_classes=10).eval()
        >>> model(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 10])
    """
    return build_timm_model(CvTModel, 'cvt_13', pretrained, '13', NUM_STAGES, **kwargs)


def cvt_21(pretrained: bool = False, **kwargs) -> CvTModel:
    """CvT-21 (31.6 M parameters), ImageNet-1k at 224 (82.5 top-1) or 384 (83.3); arguments
    (``pretrained``, ...) as :func:`cvt_13`."""
    return build_timm_model(CvTModel, 'cvt_21', pretrained, '21', NUM_STAGES, **kwargs)


def cvt_w24(pretrained: bool = False, **kwargs) -> CvTModel:
    """CvT-W24 (277 M parameters), ImageNet-22k then 1k at 384 (87.6 top-1); arguments
    (``pretrained``, ...) as :func:`cvt_13`."""
    return build_timm_model(CvTModel, 'cvt_w24', pretrained, 'w24', NUM_STAGES, **kwargs)


# ---------------------------------------------------------------------------- registrations
register_mmengine(CvT)
# Leaves of timm's fx tracing (torchvision's feature extraction): each reads sizes as ints,
# or runs an autograd Function, so it is kept as one call or module.
register_timm(__name__, [cvt_13, cvt_21, cvt_w24], PRETRAINED_CFGS,
              notrace_functions=[check_cvt_input, nlc_to_nchw, sdpa_attention, fused_quick_gelu])
