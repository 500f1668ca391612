"""CMT: Convolutional Neural Networks Meet Vision Transformers (Guo et al., CVPR 2022).

The official architecture (huawei-noah/Efficient-AI-Backbones, ``cmt_pytorch``) as an MMEngine
backbone that runs at any input size >= 32x32 and keeps the ImageNet classification stage.

Size rules (the same for every input, so dense heads see strides 4/8/16/32):

* The stem's first conv (3x3, stride 2, padding 1) gives ``ceil(H / 2)``. Every stride-2
  kernel-2 patch embedding zero-pads an odd map by one row/column at the bottom/right first,
  so stage ``i`` always has ``ceil(H / s) x ceil(W / s)`` tokens, ``s = 4, 8, 16, 32`` -- the
  sizes ResNet and MMDetection's Swin/PVT (corner padding) give, so FPN levels halve exactly.
* The key/value reduction (depth-wise conv, kernel = stride = ``sr_ratio``) likewise pads the
  map at the bottom/right to a multiple of ``sr_ratio``: the key grid is
  ``ceil(h / sr) x ceil(w / sr)`` and no token is left out of the keys.
* At sizes that are multiples of 32 nothing is padded: the official computation exactly.

Per stage: patch aggregation (a stride-2 conv; the stem before the first stage), then CMT
blocks, each a local perception unit (LPU), lightweight multi-head self-attention (LMHSA) with
the stage's relative position bias, and an inverted residual feed-forward network (IRFFN).

``relative_pos`` (one ``(heads, Nq, Nk)`` tensor per stage, a full query x key bias) is stored for
the grids of ``pretrain_img_size``; :class:`~.relative_position_bias.RelativePositionBias`
serves it at the grids of each input (resized, cached in eval mode, recomputed in the backward
with ``selective_cp``).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from torch import nn

from ..checkpoint.io import CheckpointError
from ..registry import MODELS
from .attention import attention, merge_heads, split_heads
from .base import ConvViTBackbone, check_batchnorm_statistics, resolve_arch, vit_init_
from .layers import ResidualDropPath, nchw_to_nlc, nlc_to_nchw, stochastic_depth_rates
from .matrix_resize import ceil_div, is_symbolic, resize_relative_pos
from .recomputation import run_blocks
from .relative_position_bias import RelativePositionBias

Grid = Tuple[int, int]

# Official variants. ``pretrain_img_size`` is the ImageNet training resolution, which fixes the
# shape of the relative position biases in the official checkpoints.
ARCH_SETTINGS = {
    'ti': dict(embed_dims=[46, 92, 184, 368], stem_channels=16, depths=[2, 2, 10, 2],
               mlp_ratio=3.6, pretrain_img_size=160, head_drop_rate=0.1),
    'xs': dict(embed_dims=[52, 104, 208, 416], stem_channels=16, depths=[3, 3, 12, 3],
               mlp_ratio=3.77, pretrain_img_size=192, head_drop_rate=0.1),
    's': dict(embed_dims=[64, 128, 256, 512], stem_channels=32, depths=[3, 3, 16, 3],
              mlp_ratio=4.0, pretrain_img_size=224, head_drop_rate=0.1),
    'b': dict(embed_dims=[76, 152, 304, 608], stem_channels=38, depths=[4, 4, 20, 4],
              mlp_ratio=4.0, pretrain_img_size=256, head_drop_rate=0.3),
}
# Optional arch keys and their defaults (stem_channels: half the first stage's width).
ARCH_DEFAULTS = dict(num_heads=[1, 2, 4, 8], sr_ratios=[8, 4, 2, 1], mlp_ratio=4.0,
                     pretrain_img_size=224, head_drop_rate=0.1, fc_channels=1280)
NUM_STAGES = 4
MIN_INPUT_SIZE = 32
# Training a batch of 1 with BatchNorm statistics needs 2 tokens in the stride-32 stage.
MIN_TRAIN_SIDE_BATCH_1 = 33


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Zero-pad an NCHW map at the bottom/right so both sides divide ``multiple``."""
    h, w = x.shape[-2], x.shape[-1]
    pad_h, pad_w = ceil_div(h, multiple) * multiple - h, ceil_div(w, multiple) * multiple - w
    # Symbolic sizes always pad (by zero rows when none are needed): testing whether the
    # padding is zero would fix the input size of an exported graph.
    if not is_symbolic(pad_h, pad_w) and not (pad_h or pad_w):
        return x
    return F.pad(x, (0, pad_w, 0, pad_h))


def stage_grids(img_size: Grid, sr_ratios: Sequence[int]) -> list:
    """``[(query_grid, key_grid), ...]`` per stage for an input of ``img_size`` (see the size
    rules in the module doc)."""
    h, w = img_size
    out = []
    for i, sr in enumerate(sr_ratios):
        stride = 2 ** (i + 2)
        q = (ceil_div(h, stride), ceil_div(w, stride))
        out.append((q, (ceil_div(q[0], sr), ceil_div(q[1], sr))))
    return out


def square_grids_from_shape(shape: Sequence[int]) -> Tuple[Grid, Grid]:
    """Query and key grids of a ``(heads, Nq, Nk)`` bias trained on square images (all
    official checkpoints); ``CheckpointError`` when a token count is not a square."""
    grids = []
    for n in shape[1:]:
        side = math.isqrt(n)
        if side * side != n:
            raise CheckpointError(
                f'relative_pos of shape {tuple(shape)}: {n} tokens is not a square grid, so '
                'the resolution it was trained at is unknown; only square training '
                'resolutions can be resized on loading')
        grids.append((side, side))
    return grids[0], grids[1]


class ConvBN(nn.Module):
    """Conv2d with bias -> BatchNorm, with an optional activation before (``act_first``) or
    after the norm. The official weights carry a conv bias even right before a BN, so this
    is not mmcv's ``ConvModule``, which warns about such a bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, groups: int = 1, act: Optional[nn.Module] = None,
                 act_first: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                              groups=groups)
        self.bn = nn.BatchNorm2d(out_channels)
        self.act = act or nn.Identity()
        self.act_first = act_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.act_first:
            return self.bn(self.act(x))
        return self.act(self.bn(x))


class PatchEmbed(nn.Module):
    """Stride-2 kernel-2 conv + LayerNorm; odd maps are padded at the bottom/right first."""

    def __init__(self, in_channels: int, embed_dims: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, embed_dims, kernel_size=2, stride=2)
        self.norm = nn.LayerNorm(embed_dims, eps=1e-5)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Grid]:
        x = self.proj(pad_to_multiple(x, 2))
        hw = (x.shape[-2], x.shape[-1])
        return self.norm(nchw_to_nlc(x)), hw


class LMHSA(nn.Module):
    """Lightweight multi-head self-attention: keys/values from a depth-wise-reduced map, plus
    the stage's relative position bias."""

    def __init__(self, dim: int, num_heads: int, sr_ratio: int, use_sdpa: bool = True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.sr_ratio = sr_ratio
        self.use_sdpa = use_sdpa
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        if sr_ratio > 1:
            self.sr = ConvBN(dim, dim, sr_ratio, stride=sr_ratio, groups=dim)

    def forward(self, x: torch.Tensor, hw: Grid, bias: torch.Tensor) -> torch.Tensor:
        kv = x
        if self.sr_ratio > 1:
            kv = nchw_to_nlc(self.sr(pad_to_multiple(nlc_to_nchw(x, hw), self.sr_ratio)))
        q, k, v = (split_heads(proj(tokens), self.num_heads)
                   for proj, tokens in ((self.q, x), (self.k, kv), (self.v, kv)))
        out = attention(q, k, v, self.scale, bias=bias, use_sdpa=self.use_sdpa)
        return self.proj(merge_heads(out))


class IRFFN(nn.Module):
    """Inverted residual feed-forward network: 1x1 expand, residual 3x3 depth-wise, 1x1
    reduce (each conv followed by BN; GELU before BN as in the official code)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.conv1 = ConvBN(dim, hidden, 1, act=nn.GELU(), act_first=True)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.dwconv_act = nn.GELU()
        self.dwconv_bn = nn.BatchNorm2d(hidden)
        self.conv2 = ConvBN(hidden, dim, 1)

    def forward(self, x: torch.Tensor, hw: Grid) -> torch.Tensor:
        x = self.conv1(nlc_to_nchw(x, hw))
        x = self.dwconv_bn(self.dwconv_act(self.dwconv(x) + x))
        return nchw_to_nlc(self.conv2(x))


class CMTBlock(nn.Module):
    """Local perception unit (residual 3x3 depth-wise conv), LMHSA and IRFFN."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, sr_ratio: int,
                 drop_path: float, use_sdpa: bool):
        super().__init__()
        self.lpu = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = LMHSA(dim, num_heads, sr_ratio, use_sdpa)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = IRFFN(dim, int(dim * mlp_ratio))
        self.drop_path = ResidualDropPath(drop_path)

    def forward(self, x: torch.Tensor, hw: Grid, bias: torch.Tensor) -> torch.Tensor:
        fmap = nlc_to_nchw(x, hw)
        x = nchw_to_nlc(self.lpu(fmap) + fmap)
        x = self.drop_path(x, self.attn(self.norm1(x), hw, bias))
        return self.drop_path(x, self.ffn(self.norm2(x), hw))


class CMTStage(nn.Module):
    """Patch aggregation, then CMT blocks sharing the stage's relative position bias.

    ``relative_pos`` is stored for ``query_grid`` x ``key_grid``; ``position_bias``
    (:class:`~.relative_position_bias.RelativePositionBias`) serves it at the grids of each
    input.
    """

    def __init__(self, in_channels: int, dim: int, depth: int, num_heads: int,
                 mlp_ratio: float, sr_ratio: int, drop_paths: Sequence[float],
                 query_grid: Grid, key_grid: Grid, use_sdpa: bool, with_cp: bool,
                 selective_cp: bool, bias_cache_size: int):
        super().__init__()
        self.patch_embed = PatchEmbed(in_channels, dim)
        self.query_grid, self.key_grid = tuple(query_grid), tuple(key_grid)
        self.sr_ratio = sr_ratio
        # The official init (unit normal), not a small std: the trained biases are O(1).
        self.relative_pos = nn.Parameter(
            torch.randn(num_heads, query_grid[0] * query_grid[1], key_grid[0] * key_grid[1]))
        self.position_bias = RelativePositionBias(query_grid, key_grid, bias_cache_size,
                                                  recompute_in_backward=selective_cp)
        self.blocks = nn.ModuleList(
            CMTBlock(dim, num_heads, mlp_ratio, sr_ratio, dp, use_sdpa) for dp in drop_paths)
        self.with_cp = with_cp
        self.selective_cp = selective_cp

    def relative_pos_for(self, query_grid: Grid, key_grid: Grid) -> torch.Tensor:
        """The bias for the given grids (the parameter itself at the stored grids)."""
        return self.position_bias(self.relative_pos, query_grid, key_grid)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Grid]:
        """NCHW in; (B, h*w, C) tokens and (h, w) out."""
        x, hw = self.patch_embed(x)
        key_grid = (ceil_div(hw[0], self.sr_ratio), ceil_div(hw[1], self.sr_ratio))
        bias = self.relative_pos_for(hw, key_grid)
        with self.position_bias.recomputed_in_backward(bias, self.relative_pos, hw, key_grid):
            x = run_blocks(self.blocks, x, hw, bias, with_cp=self.with_cp,
                           selective_cp=self.selective_cp)
        return x, hw


@MODELS.register_module()
class CMT(ConvViTBackbone):
    """CMT backbone for MMDetection, MMSegmentation and MMPretrain (Guo et al., CVPR 2022).

    Computes what the official ``cmt_pytorch`` model computes at any input size >= 32x32, so
    the published weights load as they are; returns a pyramid of NCHW maps (strides 4, 8, 16,
    32; stage ``i`` has ``ceil(H / s) x ceil(W / s)`` tokens) and keeps the ImageNet
    classification stage (1x1 conv, BN, Swish, pool, dropout, ``head``) for :meth:`classify`.

    Args:
        arch (str | dict): ``'ti'``, ``'xs'``, ``'s'``, ``'b'`` (see :attr:`arch_zoo`) or a
            dict with ``embed_dims``, ``num_heads``, ``depths`` and optionally
            ``stem_channels``, ``mlp_ratio``, ``sr_ratios``, ``pretrain_img_size``,
            ``head_drop_rate``, ``fc_channels``. Default ``'s'``.
        in_channels (int): image channels. Default 3.
        out_indices (Sequence[int]): stages whose maps ``forward`` returns, in this order.
            Default ``(0, 1, 2, 3)``.
        out_type (str): ``'featmap'`` (a tuple of NCHW maps) or ``'logits'`` (``(logits,)``
            for MMPretrain's ``ImageClassifier`` with a plain ``ClsHead``). With ``'featmap'``
            the classification stage and any stage after ``max(out_indices)`` are kept (for
            ``classify()`` and checkpoint loading) but frozen, so that every trainable
            parameter gets a gradient, as DDP with ``find_unused_parameters=False`` needs.
            Default ``'featmap'``.
        out_norm_cfg (dict, optional): ``None`` returns the official stage outputs;
            ``dict(type='LN')`` adds a LayerNorm per returned map (``out_norms.{stage}``).
            Default None.
        num_classes (int): classes of the Linear head used by :meth:`classify`; 0 drops it
            (``classify`` then returns the pooled features). Default 1000.
        drop_path_rate (float): stochastic depth, rising linearly over all blocks (official
            recipes: 0.1 / 0.08 / 0.1 / 0.25 for Ti / XS / S / B). Default 0.1.
        pretrain_img_size (int | tuple[int, int], optional): resolution whose token grids the
            relative position biases are stored for; None: the arch's ImageNet resolution.
            Other input sizes resize the biases bicubically. Default None.
        frozen_stages (int): -1 trains everything, ``k >= 0`` freezes the stem and the first
            ``k`` stages (parameters, ``relative_pos``, BatchNorm statistics, output norms).
            Default -1.
        norm_eval (bool): keep every BatchNorm in eval mode while training. Default False.
        with_cp (bool): recompute each block's activations in the backward pass instead of
            storing them (training only). Default False.
        selective_cp (bool): keep for the backward only the outputs of each block's
            convolutions, linear layers and attention, and recompute the element-wise
            operators between them (norms, activations, residual adds) and each stage's
            resized relative-position bias in the backward pass instead of storing their
            outputs: the same values and gradients for about half the activation memory,
            faster at detection sizes and slower at 224x224 on a CPU (docs/benchmarks.md,
            "Training memory"), so the detection and segmentation configs turn it on.
            Training only; not under ``torch.compile``, whose partitioner chooses what to
            keep. A second backward
            through one graph (``retain_graph=True``) needs ``False``. Default False.
        use_sdpa (bool): ``scaled_dot_product_attention`` with the bias as additive mask;
            ``False`` runs the reference path. Default True.
        bias_cache_size (int): resized biases kept per stage in eval mode (input sizes, LRU).
            Default 2.
        init_cfg (dict | list[dict], optional): ``dict(type='Pretrained', checkpoint=PATH or
            URL[, prefix='backbone.'][, allow_partial=True])`` loads an official CMT file or
            one of ours (biases trained at another resolution are resized once); a checkpoint
            of another arch is an error naming both, unless ``allow_partial``. Other MMEngine
            init configs are applied as usual; ``None`` is the official initialisation.
            Default None.

    Examples:
        >>> import torch
        >>> from cvt_mm.models import CMT
        >>> model = CMT(arch='s', out_norm_cfg=dict(type='LN')).eval()
        >>> [tuple(f.shape) for f in model(torch.randn(1, 3, 97, 131))]
        [(1, 64, 25, 33), (1, 128, 13, 17), (1, 256, 7, 9), (1, 512, 4, 5)]
        >>> model.classify(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
    """
    family = 'cmt'
    num_stages = NUM_STAGES
    # Published variants by name (as MMPretrain's arch_zoo); also names checkpoints' archs.
    arch_zoo = ARCH_SETTINGS
    min_input_size = MIN_INPUT_SIZE

    def __init__(self, arch: Union[str, dict] = 's', in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3), out_type: str = 'featmap',
                 out_norm_cfg: Optional[dict] = None, num_classes: int = 1000,
                 drop_path_rate: float = 0.1,
                 pretrain_img_size: Optional[Union[int, Tuple[int, int]]] = None,
                 frozen_stages: int = -1, norm_eval: bool = False, with_cp: bool = False,
                 selective_cp: bool = False, use_sdpa: bool = True, bias_cache_size: int = 2,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(in_channels=in_channels, out_indices=out_indices, out_type=out_type,
                         out_norm_cfg=out_norm_cfg, num_classes=num_classes,
                         frozen_stages=frozen_stages, norm_eval=norm_eval, with_cp=with_cp,
                         init_cfg=init_cfg)
        cfg = resolve_arch(arch, ARCH_SETTINGS, NUM_STAGES, dict(ARCH_DEFAULTS, stem_channels=None),
                           per_stage=('embed_dims', 'num_heads', 'depths', 'sr_ratios'))
        if cfg['stem_channels'] is None:
            cfg['stem_channels'] = cfg['embed_dims'][0] // 2
        if not isinstance(drop_path_rate, (int, float)) or not 0 <= drop_path_rate < 1:
            raise ValueError(f'drop_path_rate must be in [0, 1), got {drop_path_rate!r}')
        if not isinstance(selective_cp, bool):
            raise ValueError(f'selective_cp must be True or False, got {selective_cp!r}')
        if not isinstance(bias_cache_size, int) or bias_cache_size < 0:
            raise ValueError(f'bias_cache_size must be an int >= 0, got {bias_cache_size!r}')
        pretrain_img_size = pretrain_img_size or cfg['pretrain_img_size']
        if isinstance(pretrain_img_size, int):
            pretrain_img_size = (pretrain_img_size, pretrain_img_size)
        if len(pretrain_img_size) != 2 or min(pretrain_img_size) < MIN_INPUT_SIZE:
            raise ValueError(f'pretrain_img_size must be an int or (h, w), each >= '
                             f'{MIN_INPUT_SIZE}, got {pretrain_img_size!r}')

        self.arch_settings = cfg
        self.embed_dims = list(cfg['embed_dims'])
        self.depths = list(cfg['depths'])
        self.pretrain_img_size = tuple(pretrain_img_size)

        stem = cfg['stem_channels']
        self.stem = nn.Sequential(*(
            ConvBN(c_in, stem, 3, stride=stride, padding=1, act=nn.GELU(), act_first=True)
            for c_in, stride in ((in_channels, 2), (stem, 1), (stem, 1))))

        grids = stage_grids(self.pretrain_img_size, cfg['sr_ratios'])
        drop_paths = stochastic_depth_rates(drop_path_rate, self.depths)
        self.stages = nn.ModuleList()
        channels = stem
        for i in range(NUM_STAGES):
            self.stages.append(CMTStage(
                channels, self.embed_dims[i], self.depths[i], cfg['num_heads'][i],
                cfg['mlp_ratio'], cfg['sr_ratios'][i], drop_paths[i], *grids[i],
                use_sdpa=use_sdpa, with_cp=with_cp, selective_cp=selective_cp,
                bias_cache_size=bias_cache_size))
            channels = self.embed_dims[i]

        # Official classification stage: 1x1 conv -> BN -> Swish -> pool -> dropout -> Linear.
        self.cls_proj = ConvBN(self.embed_dims[-1], cfg['fc_channels'], 1, act=nn.SiLU())
        self.head_drop = nn.Dropout(cfg['head_drop_rate'])
        self.head = nn.Linear(cfg['fc_channels'], num_classes) if num_classes > 0 \
            else nn.Identity()
        self._build_out_norms()
        self._freeze()

    def _official_init(self) -> None:
        vit_init_(self)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                # The official init: PyTorch's fan_out counts every output channel even in
                # depth-wise convs, which keeps the residual LPU/IRFFN branches small; a
                # per-group fan_out makes 25+ residual convs blow activations up.
                nn.init.kaiming_normal_(m.weight, mode='fan_out')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for stage in self.stages:
            nn.init.normal_(stage.relative_pos)

    def adapt_pretrained_state_dict(self, sd: dict) -> dict:
        """Resize checkpoint biases trained at another resolution (once) to the stored grids.
        Checkpoint grids are inferred from the tensor shape (square training images)."""
        for i, stage in enumerate(self.stages):
            key = f'stages.{i}.relative_pos'
            if key not in sd or sd[key].shape == stage.relative_pos.shape:
                continue
            src = sd[key]
            if src.dim() != 3 or src.shape[0] != stage.relative_pos.shape[0]:
                raise CheckpointError(f'{key}: checkpoint {tuple(src.shape)} vs model '
                                      f'{tuple(stage.relative_pos.shape)} (number of heads '
                                      'differs)')
            src_q, src_k = square_grids_from_shape(src.shape)
            sd[key] = resize_relative_pos(src.float(), src_q, src_k, stage.query_grid,
                                          stage.key_grid).to(src.dtype)
            print_log(f'{key}: resized from query grid {src_q} x key grid {src_k} to '
                      f'{stage.query_grid} x {stage.key_grid} (bicubic)', logger='current')
        return sd


    def _check_train_batch(self, x: torch.Tensor, last_stage: int) -> None:
        # The smallest BatchNorm input of the stages that run: a stage's key/value map (sr
        # conv) or, without reduction, its token map (IRFFN).
        grids = stage_grids(tuple(x.shape[-2:]), self.arch_settings['sr_ratios'])
        # A list, not a generator: torch.compile traces min() of a list only.
        _, i, grid = min([(g[1][0] * g[1][1], i, g[1])
                          for i, g in enumerate(grids[:last_stage + 1])])
        check_batchnorm_statistics(self, x.shape[0], grid, f"stage {i}'s smallest map",
                                   MIN_TRAIN_SIDE_BATCH_1)

    def _run_stages(self, x: torch.Tensor, last: int) -> list:
        """[(NLC tokens, (h, w)), ...] of stages 0..last."""
        x = self.stem(x)
        outs = []
        for stage in self.stages[:last + 1]:
            tokens, hw = stage(x)
            outs.append((tokens, hw))
            x = nlc_to_nchw(tokens, hw)
        return outs

    def _stage_maps(self, x: torch.Tensor, last_stage: int) -> List[torch.Tensor]:
        return [nlc_to_nchw(tokens, hw) for tokens, hw in self._run_stages(x, last_stage)]

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        tokens, hw = self._run_stages(x, NUM_STAGES - 1)[-1]
        x = self.cls_proj(nlc_to_nchw(tokens, hw))
        return self.head(self.head_drop(x.mean(dim=(2, 3))))

    def _classification_modules(self) -> List[nn.Module]:
        return [self.cls_proj, self.head]

    def _stem_modules(self) -> List[nn.Module]:
        return [self.stem]
