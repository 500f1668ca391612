"""CvT: Introducing Convolutions to Vision Transformers (Wu et al., 2021).

The architecture computes what the official ``microsoft/CvT`` model computes, so the published
ImageNet weights load as they are (see ``cvt_mm/models/cvt_converter.py`` for the layouts):

* three stages, each a convolutional token embedding (Conv2d + LayerNorm) and pre-norm blocks;
  no position embedding;
* attention projects q, k and v through a depth-wise 3x3 Conv2d + BatchNorm2d (stride 1 for q,
  2 for k and v) and then a Linear each; scores are scaled by ``embed_dim ** -0.5`` with the
  stage's *full* width, as the official weights were trained;
* a cls token only in the last stage, which bypasses the convolutional projections; the final
  LayerNorm + Linear on it give the ImageNet logits.

Our keys are the official ones with ``stage{i}.`` renamed to ``stages.{i}.``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..registry import MODELS
from .attention import attention, merge_heads, split_heads
from .base import ConvViTBackbone, check_batchnorm_statistics, resolve_arch, vit_init_
from .layers import (
    FP32LayerNorm,
    ResidualDropPath,
    nchw_to_nlc,
    nlc_to_nchw,
    split_tokens,
    stochastic_depth_rates,
)
from .quick_gelu import FusedQuickGELU
from .recomputation import run_blocks

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


class ConvTokenEmbed(nn.Module):
    """Overlapping strided Conv2d, then LayerNorm over channels."""

    def __init__(self, in_channels: int, embed_dims: int, kernel_size: int, stride: int,
                 padding: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dims, kernel_size, stride, padding)
        self.norm = FP32LayerNorm(embed_dims, eps=1e-5)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        x = self.proj(x)
        hw = tuple(x.shape[2:])
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
    concatenated in front of q, k and v after them.
    """

    def __init__(self, dims: int, num_heads: int, stride_kv: int = 2, use_sdpa: bool = True):
        super().__init__()
        self.num_heads = num_heads
        # The official model scales by the full width, not the per-head width; the published
        # weights depend on it.
        self.scale = dims ** -0.5
        self.use_sdpa = use_sdpa
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
        q, k, v = (proj(fmap) for proj in (self.conv_proj_q, self.conv_proj_k,
                                           self.conv_proj_v))
        if num_cls_tokens:  # (a concatenation with nothing would still copy)
            q, k, v = (torch.cat([cls_tokens, t], dim=1) for t in (q, k, v))
        q = split_heads(self.proj_q(q), self.num_heads)
        k = split_heads(self.proj_k(k), self.num_heads)
        v = split_heads(self.proj_v(v), self.num_heads)
        out = attention(q, k, v, self.scale, use_sdpa=self.use_sdpa)
        return self.proj(merge_heads(out))


class Mlp(nn.Module):
    """``fc2(QuickGELU(fc1(x)))``, the activation of the official weights (in fused passes:
    :class:`~.quick_gelu.FusedQuickGELU`)."""

    def __init__(self, dims: int, hidden_dims: int):
        super().__init__()
        self.fc1 = nn.Linear(dims, hidden_dims)
        self.act = FusedQuickGELU()
        self.fc2 = nn.Linear(hidden_dims, dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class CvTBlock(nn.Module):
    """Pre-norm transformer block with convolutional attention."""

    def __init__(self, dims: int, num_heads: int, drop_path: float, use_sdpa: bool):
        super().__init__()
        self.norm1 = FP32LayerNorm(dims, eps=1e-5)
        self.attn = ConvAttention(dims, num_heads, use_sdpa=use_sdpa)
        self.drop_path = ResidualDropPath(drop_path)
        self.norm2 = FP32LayerNorm(dims, eps=1e-5)
        self.mlp = Mlp(dims, dims * MLP_RATIO)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], num_cls_tokens: int) -> torch.Tensor:
        x = self.drop_path(x, self.attn(self.norm1(x), hw, num_cls_tokens))
        return self.drop_path(x, self.mlp(self.norm2(x)))


class CvTStage(nn.Module):
    """Token embedding, optional cls token and blocks; NCHW in, (NCHW map, cls token) out."""

    def __init__(self, index: int, in_channels: int, dims: int, num_heads: int, depth: int,
                 drop_path_rates: Sequence[float], with_cls_token: bool, use_sdpa: bool,
                 with_cp: bool):
        super().__init__()
        self.patch_embed = ConvTokenEmbed(in_channels, dims, PATCH_KERNELS[index],
                                          PATCH_STRIDES[index], PATCH_PADDINGS[index])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dims)) if with_cls_token else None
        self.blocks = nn.ModuleList(
            CvTBlock(dims, num_heads, drop_path_rates[j], use_sdpa) for j in range(depth))
        self.with_cp = with_cp

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        x, hw = self.patch_embed(x)
        num_cls = 0
        if self.cls_token is not None:
            num_cls = 1
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = run_blocks(self.blocks, x, hw, num_cls, with_cp=self.with_cp)
        cls_token, x = split_tokens(x, num_cls)
        return nlc_to_nchw(x, hw), cls_token if num_cls else None


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


@MODELS.register_module()
class CvT(ConvViTBackbone):
    """CvT backbone for MMDetection, MMSegmentation and MMPretrain (Wu et al., ICCV 2021).

    Computes what the official ``microsoft/CvT`` model computes, so the published weights load
    as they are; returns a pyramid of NCHW maps (strides 4, 8, 16) and keeps the ImageNet
    classification stage (final LayerNorm on the cls token, ``head``) for :meth:`classify`.

    Args:
        arch (str | dict): ``'13'``, ``'21'``, ``'w24'`` (see :attr:`arch_zoo`), or
            ``dict(embed_dims, num_heads, depths)`` with three entries each. Default ``'13'``.
        in_channels (int): image channels. Default 3.
        out_indices (Sequence[int]): stages whose maps ``forward`` returns, in this order.
            Default ``(0, 1, 2)``.
        out_type (str): ``'featmap'`` (a tuple of NCHW maps) or ``'logits'`` (``(logits,)``,
            for an MMPretrain ``ImageClassifier`` with a loss-only ``ClsHead``). With
            ``'featmap'`` the classification stage and any stage after ``max(out_indices)``
            are kept (for ``classify()`` and checkpoint loading) but frozen, so that every
            trainable parameter gets a gradient, as DDP with ``find_unused_parameters=False``
            needs. Default ``'featmap'``.
        out_norm_cfg (dict, optional): ``None`` returns the official stage outputs;
            ``dict(type='LN')`` adds a LayerNorm per returned map (``out_norms.{stage}``), as
            MMDetection's Swin/PVT do. Default None.
        num_classes (int): classes of the Linear head on the cls token; 0 for no head
            (``classify`` then returns the normalised cls token). Default 1000.
        drop_path_rate (float | Sequence[float]): stochastic depth of the last stage (the
            official recipe: 0 / 0 / 0.1, rising linearly within the stage), or three
            per-stage rates. Default 0.1.
        frozen_stages (int): as ResNet/Swin: -1 trains everything, 0 freezes the stem (stage
            0's token embedding), ``k`` the first ``k`` stages; frozen parts stay in eval mode.
            Default -1.
        norm_eval (bool): keep every BatchNorm in eval mode while training. Default False.
        with_cp (bool): recompute each block's activations in the backward pass instead of
            storing them (training only). Default False.
        use_sdpa (bool): fused attention; ``False`` runs the plain reference attention.
            Default True.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained', checkpoint=PATH or
            URL[, prefix='backbone.'][, allow_partial=True])`` loads any known CvT layout
            (official, Hugging Face, ours); a checkpoint of another arch is an error naming
            both, unless ``allow_partial``. Other MMEngine init configs are applied as usual;
            ``None`` is the official initialisation. Default None.

    Examples:
        >>> import torch
        >>> from cvt_mm.models import CvT
        >>> model = CvT(arch='13', out_norm_cfg=dict(type='LN')).eval()
        >>> [tuple(f.shape) for f in model(torch.randn(1, 3, 224, 320))]
        [(1, 64, 56, 80), (1, 192, 28, 40), (1, 384, 14, 20)]
        >>> model.classify(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
    """
    family = 'cvt'
    num_stages = NUM_STAGES
    # Published variants by name (as MMPretrain's arch_zoo); also names checkpoints' archs.
    arch_zoo = ARCH_SETTINGS
    min_input_size = MIN_INPUT_SIZE

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
                 use_sdpa: bool = True,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(in_channels=in_channels, out_indices=out_indices, out_type=out_type,
                         out_norm_cfg=out_norm_cfg, num_classes=num_classes,
                         frozen_stages=frozen_stages, norm_eval=norm_eval, with_cp=with_cp,
                         init_cfg=init_cfg)
        spec = resolve_arch(arch, ARCH_SETTINGS, NUM_STAGES)
        self.embed_dims = spec['embed_dims']
        self.num_heads = spec['num_heads']
        self.depths = spec['depths']
        rates = stage_drop_path_rates(drop_path_rate, self.depths)

        self.stages = nn.ModuleList()
        channels = in_channels
        for i in range(NUM_STAGES):
            self.stages.append(
                CvTStage(i, channels, self.embed_dims[i], self.num_heads[i], self.depths[i],
                         rates[i], with_cls_token=i == NUM_STAGES - 1, use_sdpa=use_sdpa,
                         with_cp=with_cp))
            channels = self.embed_dims[i]

        # The classification stage: final norm on the cls token and the ImageNet head.
        self.norm = FP32LayerNorm(self.embed_dims[-1], eps=1e-5)
        self.head = nn.Linear(self.embed_dims[-1], num_classes) if num_classes > 0 \
            else nn.Identity()
        self._build_out_norms()
        self._freeze()

    def _official_init(self) -> None:
        # microsoft/CvT's trunc_normal init: Linear weights and the cls token; convolutions
        # keep PyTorch's default.
        vit_init_(self)
        nn.init.trunc_normal_(self.stages[-1].cls_token, std=0.02)

    def _check_train_batch(self, x: torch.Tensor, last_stage: int) -> None:
        # The smallest BatchNorm input: the last stage's stride-2 key/value projection.
        kv = [-(-n // 2) for n in stage_sizes(x.shape[2:])[last_stage]]
        check_batchnorm_statistics(self, x.shape[0], kv, f"stage {last_stage}'s key/value map",
                                   MIN_TRAIN_SIDE_BATCH_1)

    def _run_stages(self, x: torch.Tensor, last_stage: int):
        """Run stages 0..last_stage; return their maps and the last stage's cls token."""
        maps, cls_token = [], None
        for stage in self.stages[:last_stage + 1]:
            x, cls_token = stage(x)
            maps.append(x)
        return maps, cls_token

    def _stage_maps(self, x: torch.Tensor, last_stage: int) -> List[torch.Tensor]:
        return self._run_stages(x, last_stage)[0]

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        _, cls_token = self._run_stages(x, NUM_STAGES - 1)
        return self.head(self.norm(cls_token[:, 0]))

    def _classification_modules(self) -> List[nn.Module]:
        return [self.norm, self.head]

    def _stem_modules(self) -> List[nn.Module]:
        return [self.stages[0].patch_embed]
