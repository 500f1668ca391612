"""CMT: Convolutional Neural Networks Meet Vision Transformers (Guo et al., CVPR 2022).

The official architecture (huawei-noah/Efficient-AI-Backbones, ``cmt_pytorch``) at any input
size >= 32x32, keeping the ImageNet classification stage. Per stage: patch aggregation (a
stride-2 conv; the stem before the first stage), then CMT blocks, each a local perception unit
(LPU), lightweight multi-head self-attention (LMHSA) with the stage's relative position bias,
and an inverted residual feed-forward network (IRFFN).

Size rules, the same for every input, so that dense heads see strides 4/8/16/32 and FPN levels
halve exactly: an odd map is zero-padded by one row/column at the bottom/right before each
stride-2 patch embedding, so stage ``i`` has ``ceil(H / s) x ceil(W / s)`` tokens (as ResNet
and MMDetection's Swin/PVT); the key/value reduction (kernel = stride = ``sr_ratio``) pads the
same way, so the key grid is ``ceil(h / sr) x ceil(w / sr)``. At multiples of 32 nothing is
padded: the official computation exactly. ``relative_pos`` (a full ``(heads, Nq, Nk)`` bias per
stage) is stored for the grids of ``pretrain_img_size`` and resized bicubically to each input's
(:mod:`.pos_embed_rel`; on the fast path
:class:`~.fast.relative_position_bias.RelativePositionBias`). Whether a block takes its fast
path is its own ``fast_path`` attribute, read from :func:`~.fast.use_fast_paths` when built
and set per model by :meth:`CMTModel.set_fast_paths`.

In this file: the blocks, the model (:class:`CMTModel`, timm's API), the OpenMMLab backbone
(:class:`CMT`, ``type='CMT'``), the arch table, the checkpoint layouts, and the timm entry
points with their pretrained metadata.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint.formats import WeightFormat, has_key_matching, regex_rename, register_format
from ..compat import HAS_SELECTIVE_CHECKPOINT, is_compiling, require
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
from .fast.relative_position_bias import RelativePositionBias
from .layers import (
    ResidualDropPath,
    ceil_div,
    is_symbolic,
    merge_heads,
    nchw_to_nlc,
    nlc_to_nchw,
    split_heads,
    stochastic_depth_rates,
)
from .pos_embed_rel import interpolate_relative_pos, resample_checkpoint_bias
from .recomputation import run_blocks

__all__ = ['CMTModel', 'CMT', 'ARCH_SETTINGS', 'checkpoint_filter_fn', 'cmt_ti', 'cmt_xs',
           'cmt_s', 'cmt_b']

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
    """Zero-pad an NCHW map at the bottom/right so both sides divide ``multiple``. A leaf of
    timm's fx tracing (registered with its notrace functions): whether to pad depends on the
    sizes."""
    h, w = x.shape[-2], x.shape[-1]
    pad_h, pad_w = ceil_div(h, multiple) * multiple - h, ceil_div(w, multiple) * multiple - w
    # Traced (torch.compile, torch.export), always pad (by zero rows when none are needed):
    # testing whether the padding is zero would make a compiled graph guard on it (a recompile
    # whenever an input size flips it) and fix an exported graph's input size.
    traced = False
    if not torch.jit.is_scripting():  # (TorchScript's sizes are ints)
        traced = is_symbolic(pad_h, pad_w) or is_compiling()
    if not traced and pad_h == 0 and pad_w == 0:
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


def check_cmt_input(x: torch.Tensor, owner: str, in_chans: int, last_stage: int,
                    batchnorm_training: bool, sr_ratios: List[int]) -> None:
    """``ValueError`` for a batch ``owner`` (a model's name) cannot take: not a (B, in_chans,
    H, W) batch of at least 32x32 (:func:`~._helpers.check_image`), or, while its BatchNorms
    train, one whose smallest BatchNorm input in stages ``0..last_stage`` (a key/value map,
    or a token map where ``sr_ratios`` reduce nothing) has one value per channel. It reads
    sizes as ints, so timm's fx tracing keeps it as one call (registered with timm's notrace
    functions)."""
    check_image(owner, x, in_chans, MIN_INPUT_SIZE)
    if batchnorm_training:
        # Each stage's key/value grid in turn, not the smallest by min(): torch.compile cannot
        # trace min() over symbolic sizes (a graph break under dynamic shapes).
        for i, (_, grid) in enumerate(stage_grids(tuple(x.shape[-2:]),
                                                  sr_ratios)[:last_stage + 1]):
            check_batchnorm_statistics(owner, x.shape[0], grid, f"stage {i}'s smallest map",
                                       MIN_TRAIN_SIDE_BATCH_1)


# ------------------------------------------------------------------------------------ blocks
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
    the stage's relative position bias. ``fast_path`` (read from :func:`~.fast.use_fast_paths`
    when built): the fused ``sdpa_attention`` instead of ``softmax(q kᵀ * scale + bias) v`` as
    written."""

    def __init__(self, dim: int, num_heads: int, sr_ratio: int):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.sr_ratio = sr_ratio
        self.fast_path = use_fast_paths()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        # None without reduction, not absent: TorchScript then compiles only the branch taken.
        self.sr = ConvBN(dim, dim, sr_ratio, stride=sr_ratio, groups=dim) if sr_ratio > 1 \
            else None

    def forward(self, x: torch.Tensor, hw: Grid, bias: torch.Tensor) -> torch.Tensor:
        kv = x
        if self.sr is not None:
            kv = nchw_to_nlc(self.sr(pad_to_multiple(nlc_to_nchw(x, hw), self.sr_ratio)))
        q = split_heads(self.q(x), self.num_heads)
        k = split_heads(self.k(kv), self.num_heads)
        v = split_heads(self.v(kv), self.num_heads)
        # TorchScript takes the formula: the fused path's autograd Function is not scriptable.
        if not torch.jit.is_scripting() and self.fast_path:
            x = sdpa_attention(q, k, v, self.scale, bias=bias)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale + bias.to(q.dtype)
            x = scores.softmax(dim=-1) @ v
        return self.proj(merge_heads(x))


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
                 drop_path: float):
        super().__init__()
        self.lpu = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = LMHSA(dim, num_heads, sr_ratio)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = IRFFN(dim, int(dim * mlp_ratio))
        self.drop_path = ResidualDropPath(drop_path)

    def forward(self, x: torch.Tensor, hw: Grid, bias: torch.Tensor) -> torch.Tensor:
        fmap = nlc_to_nchw(x, hw)
        x = nchw_to_nlc(self.lpu(fmap) + fmap)
        x = self.drop_path(x, self.attn(self.norm1(x), hw, bias))
        return self.drop_path(x, self.ffn(self.norm2(x), hw))


class CMTStage(nn.Module):
    """Patch aggregation, then CMT blocks sharing the stage's relative position bias: an NCHW
    map in; (B, h*w, C) tokens and (h, w) out.

    ``relative_pos`` is stored for ``query_grid`` x ``key_grid`` and resized to the grids of
    each input (:meth:`relative_pos_for`). ``fast_path`` (read from
    :func:`~.fast.use_fast_paths` when built): ``position_bias`` resizes (matrix products),
    caches in eval mode and, under ``selective_cp``, recomputes the resized bias in the
    backward; without it, ``F.interpolate`` and no cache.
    """

    def __init__(self, in_channels: int, dim: int, depth: int, num_heads: int,
                 mlp_ratio: float, sr_ratio: int, drop_paths: Sequence[float],
                 query_grid: Grid, key_grid: Grid, selective_cp: bool, bias_cache_size: int):
        super().__init__()
        self.patch_embed = PatchEmbed(in_channels, dim)
        self.query_grid, self.key_grid = tuple(query_grid), tuple(key_grid)
        self.sr_ratio = sr_ratio
        # The official init (unit normal), not a small std: the trained biases are O(1).
        self.relative_pos = nn.Parameter(
            torch.randn(num_heads, query_grid[0] * query_grid[1], key_grid[0] * key_grid[1]))
        # The fast path's resize, eval cache and recomputation. Built whatever fast_path says, so
        # that set_fast_paths can turn it on: it holds no parameter or buffer, and the
        # checkpoint keys stay those of the official layout.
        self.position_bias = RelativePositionBias(
            query_grid, key_grid, bias_cache_size, recompute_in_backward=selective_cp)
        self.fast_path = use_fast_paths()
        self.blocks = nn.ModuleList(
            CMTBlock(dim, num_heads, mlp_ratio, sr_ratio, dp) for dp in drop_paths)
        self.grad_checkpointing = False
        self.selective_cp = selective_cp

    def relative_pos_for(self, query_grid: Grid, key_grid: Grid) -> torch.Tensor:
        """The bias for the given grids (the parameter itself at the stored grids). TorchScript
        takes the reference resize: the fast path's cache is Python state."""
        if not torch.jit.is_scripting() and self.fast_path:
            return self.position_bias(self.relative_pos, query_grid, key_grid)
        return interpolate_relative_pos(self.relative_pos, self.query_grid, self.key_grid,
                                        query_grid, key_grid)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Grid]:
        x, hw = self.patch_embed(x)
        key_grid = (ceil_div(hw[0], self.sr_ratio), ceil_div(hw[1], self.sr_ratio))
        bias = self.relative_pos_for(hw, key_grid)
        if torch.jit.is_scripting():  # recomputation (run_blocks) is eager-only
            for block in self.blocks:
                x = block(x, hw, bias)
            return x, hw
        if not self.fast_path:
            return run_blocks(self.blocks, x, hw, bias, with_cp=self.grad_checkpointing,
                              selective_cp=self.selective_cp), hw
        with self.position_bias.recomputed_in_backward(bias, self.relative_pos, hw, key_grid):
            x = run_blocks(self.blocks, x, hw, bias, with_cp=self.grad_checkpointing,
                           selective_cp=self.selective_cp)
        return x, hw


def init_weights_official(module: nn.Module, init=nn.init) -> None:
    """The official CMT initialisation of ``module`` itself: ViT's for Linear layers and norms,
    Kaiming-normal (fan out) convolutions with zero biases, unit-normal position biases.
    ``init`` as in :func:`~._helpers.vit_init_`."""
    vit_init_(module, init=init)
    if isinstance(module, nn.Conv2d):
        # PyTorch's fan_out counts every output channel even in depth-wise convs, which keeps
        # the residual LPU/IRFFN branches small; a per-group fan_out makes 25+ residual convs
        # blow activations up.
        init.kaiming_normal_(module.weight, mode='fan_out')
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, CMTStage):
        init.normal_(module.relative_pos)


# ------------------------------------------------------------------------------------- model
class CMTModel(nn.Module):
    """CMT as timm's models are: ``forward`` gives the ImageNet logits, ``forward_features``
    the last stage's map and ``forward_head`` the official classification stage (1x1 conv, BN,
    Swish, average pool, dropout, Linear); ``forward_intermediates`` gives the stage maps
    (strides 4, 8, 16, 32; stage ``i`` has ``ceil(H / s) x ceil(W / s)`` tokens), with
    ``feature_info``, ``set_grad_checkpointing``, ``group_matcher``, ``reset_classifier`` and
    ``prune_intermediate_layers``. What the timm entry points (``cmt_s``, ...), the Hugging
    Face backbone and the OpenMMLab backbone :class:`CMT` run.

    Args:
        arch (str | dict): ``'ti'``, ``'xs'``, ``'s'``, ``'b'`` (see :attr:`arch_zoo`) or a
            dict with ``embed_dims``, ``num_heads``, ``depths`` and optionally
            ``stem_channels``, ``mlp_ratio``, ``sr_ratios``, ``pretrain_img_size``,
            ``head_drop_rate``, ``fc_channels``. Default ``'s'``.
        in_chans (int): image channels. Default 3.
        num_classes (int): classes of the Linear head; 0 drops it (the forward then returns
            the pooled features). Default 1000.
        global_pool (str): ``'avg'`` (official) or ``''`` (no pooling: ``forward_head`` returns
            the classification stage's map; only without a head). Default ``'avg'``.
        drop_rate (float, optional): dropout before the head; None: the arch's
            ``head_drop_rate``. Default None.
        drop_path_rate (float): stochastic depth, rising linearly over all blocks (official
            recipes: 0.1 / 0.08 / 0.1 / 0.25 for Ti / XS / S / B). Default 0.1.
        pretrain_img_size (int | tuple[int, int], optional): resolution whose token grids the
            relative position biases are stored for; None: the arch's ImageNet resolution.
            Other input sizes resize the biases bicubically. Default None.
        selective_cp (bool): keep for the backward only the outputs of each block's
            convolutions, linear layers and attention, and recompute the element-wise
            operators between them (norms, activations, residual adds) and, on the fast path,
            each stage's resized relative-position bias in the backward pass instead of
            storing their outputs: the same values and gradients for about half the activation
            memory, faster at detection sizes and slower at 224x224 on a CPU
            (docs/benchmarks.md, "Training memory"), so the detection and segmentation configs
            turn it on. Training only; not under ``torch.compile``, whose partitioner chooses
            what to keep. A second backward through one graph (``retain_graph=True``) needs
            ``False``. Default False.
        bias_cache_size (int): resized biases kept per stage in eval mode on the fast path
            (input sizes, LRU). Default 2.
        fast_paths (bool, optional): the fast paths of :mod:`cvt_mm.models.fast` (``True``) or
            the formulas as written (``False``), set after building by :meth:`set_fast_paths`;
            None leaves each block with what :func:`~.fast.use_fast_paths` said when it was
            built. Default None.

    Example::

        >>> model = CMTModel('s').eval()
        >>> model(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
        >>> [tuple(f.shape) for f in model.forward_intermediates(
        ...     torch.randn(1, 3, 97, 131), intermediates_only=True)]
        [(1, 64, 25, 33), (1, 128, 13, 17), (1, 256, 7, 9), (1, 512, 4, 5)]
    """
    family = 'cmt'
    num_stages = NUM_STAGES
    # Published variants by name (as MMPretrain's arch_zoo); also names checkpoints' archs.
    arch_zoo = ARCH_SETTINGS
    min_input_size = MIN_INPUT_SIZE
    # The convolution that reads the image (timm adapts it to another ``in_chans``).
    first_conv = 'stem.0.conv'

    def __init__(self, arch: Union[str, dict] = 's', in_chans: int = 3, num_classes: int = 1000,
                 global_pool: str = 'avg', drop_rate: Optional[float] = None,
                 drop_path_rate: float = 0.1,
                 pretrain_img_size: Optional[Union[int, Tuple[int, int]]] = None,
                 selective_cp: bool = False, bias_cache_size: int = 2,
                 fast_paths: Optional[bool] = None):
        super().__init__()
        name = type(self).__name__
        check_int(name, 'in_channels', in_chans, 1)
        check_int(name, 'num_classes', num_classes, 0, ' (0: no head)')
        self._check_pool(global_pool, num_classes)
        cfg = resolve_arch(arch, ARCH_SETTINGS, NUM_STAGES, dict(ARCH_DEFAULTS, stem_channels=None),
                           per_stage=('embed_dims', 'num_heads', 'depths', 'sr_ratios'))
        if cfg['stem_channels'] is None:
            cfg['stem_channels'] = cfg['embed_dims'][0] // 2
        if not isinstance(drop_path_rate, (int, float)) or not 0 <= drop_path_rate < 1:
            raise ValueError(f'drop_path_rate must be in [0, 1), got {drop_path_rate!r}')
        if not isinstance(selective_cp, bool):
            raise ValueError(f'selective_cp must be True or False, got {selective_cp!r}')
        if selective_cp:
            require(HAS_SELECTIVE_CHECKPOINT, 'selective_cp=True (use with_cp=True instead)',
                    '2.4')
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
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.grad_checkpointing = False

        stem = cfg['stem_channels']
        self.stem = nn.Sequential(*(
            ConvBN(c_in, stem, 3, stride=stride, padding=1, act=nn.GELU(), act_first=True)
            for c_in, stride in ((in_chans, 2), (stem, 1), (stem, 1))))

        grids = stage_grids(self.pretrain_img_size, cfg['sr_ratios'])
        drop_paths = stochastic_depth_rates(drop_path_rate, self.depths)
        self.stages = nn.ModuleList()
        self.feature_info = []
        channels = stem
        for i in range(NUM_STAGES):
            self.stages.append(CMTStage(
                channels, self.embed_dims[i], self.depths[i], cfg['num_heads'][i],
                cfg['mlp_ratio'], cfg['sr_ratios'][i], drop_paths[i], *grids[i],
                selective_cp=selective_cp, bias_cache_size=bias_cache_size))
            channels = self.embed_dims[i]
            self.feature_info.append(dict(num_chs=channels, reduction=2 ** (i + 2),
                                          module=f'stages.{i}'))

        # Official classification stage: 1x1 conv -> BN -> Swish -> pool -> dropout -> Linear.
        self.num_features = self.embed_dims[-1]
        self.head_hidden_size = cfg['fc_channels']
        self.cls_proj = ConvBN(self.embed_dims[-1], cfg['fc_channels'], 1, act=nn.SiLU())
        self.head_drop = nn.Dropout(cfg['head_drop_rate'] if drop_rate is None else drop_rate)
        self.head = nn.Linear(self.head_hidden_size, num_classes) if num_classes \
            else nn.Identity()
        self.reset_parameters()
        if fast_paths is not None:
            self.set_fast_paths(fast_paths)

    def reset_parameters(self) -> None:
        """The official initialisation (:func:`init_weights_official`)."""
        self.apply(init_weights_official)

    def adapt_pretrained_state_dict(self, sd: dict) -> dict:
        """Checkpoint biases trained at another (square) resolution, resized once to the
        stored grids (:func:`~.pos_embed_rel.resample_checkpoint_bias`)."""
        for i, stage in enumerate(self.stages):
            key = f'stages.{i}.relative_pos'
            if key in sd:
                sd[key] = resample_checkpoint_bias(key, sd[key], stage.relative_pos,
                                                   stage.query_grid, stage.key_grid)
        return sd

    # ----------------------------------------------------------------- timm's model interface
    def stem_modules(self) -> List[nn.Module]:
        return [self.stem]

    def classification_modules(self) -> List[nn.Module]:
        return [self.cls_proj, self.head]

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        # The official run decays everything 2-D and up, relative_pos included
        # (configs/imagenet_cmt_s_300e_in1k.py).
        return set()

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        """Parameter groups in order of depth, for timm's layer-wise LR decay."""
        return dict(stem=r'^stem', blocks=r'^stages\.(\d+)' if coarse else [
            (r'^stages\.(\d+)\.blocks\.(\d+)', None),
            (r'^stages\.(\d+)\.(?:patch_embed|relative_pos)', (0, )),
            (r'^cls_proj', (99999, )),
        ])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass (training only)."""
        self.grad_checkpointing = enable
        for stage in self.stages:
            stage.grad_checkpointing = enable

    @torch.jit.ignore
    def set_fast_paths(self, enable: bool = True) -> None:
        """Run this model on the fast paths (fused attention; the bias's matrix resize, cache
        and recomputation) or, with ``False``, on the formulas as written, whatever
        :func:`~.fast.use_fast_paths` said when it was built
        (:func:`~._helpers.set_leaf_fast_paths`)."""
        set_leaf_fast_paths(self, enable)

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def _check_pool(self, global_pool: str, num_classes: int) -> None:
        check_choice('global_pool', global_pool, ('avg', ''))
        if global_pool == '' and num_classes:
            raise ValueError("global_pool='' (no pooling) leaves no vector for a head: use "
                             'num_classes=0 with it')

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new head for ``num_classes`` (0: none); ``global_pool`` ``'avg'`` or ``''``."""
        check_int(type(self).__name__, 'num_classes', num_classes, 0, ' (0: no head)')
        self._check_pool(self.global_pool if global_pool is None else global_pool, num_classes)
        if global_pool is not None:
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = nn.Linear(self.head_hidden_size, num_classes) if num_classes \
            else nn.Identity()

    def _check_input(self, x: torch.Tensor, last_stage: int) -> None:
        """:func:`check_cmt_input` for an input to stages ``0..last_stage``."""
        check_cmt_input(x, type(self).__name__, self.in_chans, last_stage,
                        self.training and batchnorm_trains(self),
                        self.arch_settings['sr_ratios'])

    def forward_intermediates(
            self, x: torch.Tensor, indices: Optional[Union[int, Sequence[int]]] = None,
            norm: bool = False, stop_early: bool = False, output_fmt: str = 'NCHW',
            intermediates_only: bool = False):
        """The maps of the stages ``indices`` names (timm's convention: None all, an int the
        last n, a sequence those; in stage order), NCHW. ``norm`` is accepted for timm's
        interface; CMT has no final norm. ``stop_early`` runs no stage after the last one
        asked for. Returns the maps, or ``(forward_features(x), maps)`` unless
        ``intermediates_only``."""
        check_choice('output_fmt', output_fmt, ('NCHW', ))
        take, last = take_indices(len(self.stages), indices)
        stages = self.stages[:last + 1] if stop_early or intermediates_only else self.stages
        self._check_input(x, len(stages) - 1)
        x = self.stem(x)
        intermediates = []
        for i, stage in enumerate(stages):
            x = nlc_to_nchw(*stage(x))
            if i in take:
                intermediates.append(x)
        if intermediates_only:
            return intermediates
        return x, intermediates

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True) -> List[int]:
        """Drop what ``forward_intermediates(indices)`` does not need (the stages after the
        last index, the classification stage); returns the indices, absolute."""
        take, last = take_indices(len(self.stages), indices, name='out_indices')
        pruned_end = last < len(self.stages) - 1
        self.stages = self.stages[:last + 1]
        if prune_head or pruned_end:
            self.num_features = self.head_hidden_size = self.feature_info[last]['num_chs']
            self.cls_proj = nn.Identity()
            self.reset_classifier(0, '')
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's map, ``(B, C, ceil(H / 32), ceil(W / 32))``."""
        # TorchScript compiles no checks (they format sizes into messages); torch's own
        # errors remain.
        if not torch.jit.is_scripting():
            self._check_input(x, len(self.stages) - 1)
        x = self.stem(x)
        for stage in self.stages:
            tokens, hw = stage(x)
            x = nlc_to_nchw(tokens, hw)
        return x

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.cls_proj(x)
        if self.global_pool == 'avg':
            x = x.mean(dim=(2, 3))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    checkpoint_filter = staticmethod(timm_checkpoint_filter)


# ---------------------------------------------------------------------- OpenMMLab backbone
class CMT(PyramidBackbone, CMTModel):
    """CMT backbone for MMDetection, MMSegmentation and MMPretrain: :class:`CMTModel` with
    OpenMMLab's backbone conventions (:class:`~.backbone.PyramidBackbone`). ``forward`` returns
    a tuple of NCHW maps (strides 4, 8, 16, 32; stage ``i`` has ``ceil(H / s) x ceil(W / s)``
    tokens); the ImageNet classification stage stays, for :meth:`classify` and
    ``out_type='logits'``.

    Args:
        arch (str | dict): as :class:`CMTModel`; so are ``num_classes``, ``drop_path_rate``,
            ``pretrain_img_size``, ``selective_cp``, ``fast_paths`` and ``bias_cache_size``.
        in_channels (int): image channels (the model's ``in_chans``). Default 3.
        out_indices, out_type, out_norm_cfg, frozen_stages, norm_eval, with_cp, init_cfg:
            OpenMMLab's backbone arguments (:class:`~.backbone.PyramidBackbone`); here the
            stem is the three stem convolutions, and a frozen stage's ``relative_pos``
            too. Biases of a checkpoint trained at another resolution are resized once.

    Examples:
        >>> import torch
        >>> from cvt_mm.models import CMT
        >>> model = CMT(arch='s', out_norm_cfg=dict(type='LN')).eval()
        >>> [tuple(f.shape) for f in model(torch.randn(1, 3, 97, 131))]
        [(1, 64, 25, 33), (1, 128, 13, 17), (1, 256, 7, 9), (1, 512, 4, 5)]
        >>> model.classify(torch.randn(1, 3, 224, 224)).shape
        torch.Size([1, 1000])
    """

    def __init__(self, arch: Union[str, dict] = 's', in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3), out_type: str = 'featmap',
                 out_norm_cfg: Optional[dict] = None, num_classes: int = 1000,
                 drop_path_rate: float = 0.1,
                 pretrain_img_size: Optional[Union[int, Tuple[int, int]]] = None,
                 frozen_stages: int = -1, norm_eval: bool = False, with_cp: bool = False,
                 selective_cp: bool = False, fast_paths: Optional[bool] = None,
                 bias_cache_size: int = 2, init_cfg: Optional[Union[dict, List[dict]]] = None):
        CMTModel.__init__(self, arch, in_chans=in_channels, num_classes=num_classes,
                          drop_path_rate=drop_path_rate, pretrain_img_size=pretrain_img_size,
                          selective_cp=selective_cp, bias_cache_size=bias_cache_size,
                          fast_paths=fast_paths)
        self._init_backbone(in_channels, out_indices, out_type, out_norm_cfg, frozen_stages,
                            norm_eval, with_cp, init_cfg)


# --------------------------------------------------------------------- checkpoint layouts
# Official (stage letters a-d)          -> ours (stage index 0-3)
#   stem_conv{n} / stem_norm{n}          -> stem.{n-1}.conv / stem.{n-1}.bn
#   patch_embed_{l}.proj / .norm         -> stages.{i}.patch_embed.proj / .norm
#   relative_pos_{l}                     -> stages.{i}.relative_pos
#   blocks_{l}.{j}.proj (LPU)            -> stages.{i}.blocks.{j}.lpu
#   blocks_{l}.{j}.attn.sr.0 / .sr.1     -> stages.{i}.blocks.{j}.attn.sr.conv / .sr.bn
#   blocks_{l}.{j}.mlp.conv1.0 / .2      -> stages.{i}.blocks.{j}.ffn.conv1.conv / .bn
#   blocks_{l}.{j}.mlp.proj / .proj_bn   -> stages.{i}.blocks.{j}.ffn.dwconv / .dwconv_bn
#   blocks_{l}.{j}.mlp.conv2.0 / .1      -> stages.{i}.blocks.{j}.ffn.conv2.conv / .bn
#   blocks_{l}.{j}.{norm1,norm2,attn.*}  -> stages.{i}.blocks.{j}.{same}
#   _fc / _bn / head                     -> cls_proj.conv / cls_proj.bn / head
# The OpenMMLab backbone's own: out_norms.{i} (optional norms for dense heads).
_STAGE_LETTERS = 'abcd'
_BLOCK = r'^blocks_([a-d])\.(\d+)\.'


def _stage(sub: str):
    """``re.sub`` replacement: stage letter (group 1) -> ``stages.{i}.`` + ``sub`` formatted
    with the match groups (``{1}`` = block index)."""
    return lambda m: f'stages.{_STAGE_LETTERS.index(m.group(1))}.' + sub.format(*m.groups())


OFFICIAL_RULES = [(_BLOCK + old, _stage('blocks.{1}.' + new)) for old, new in (
    (r'proj\.', 'lpu.'),
    (r'attn\.sr\.0\.', 'attn.sr.conv.'),
    (r'attn\.sr\.1\.', 'attn.sr.bn.'),
    (r'mlp\.conv1\.0\.', 'ffn.conv1.conv.'),
    (r'mlp\.conv1\.2\.', 'ffn.conv1.bn.'),
    (r'mlp\.proj\.', 'ffn.dwconv.'),
    (r'mlp\.proj_bn\.', 'ffn.dwconv_bn.'),
    (r'mlp\.conv2\.0\.', 'ffn.conv2.conv.'),
    (r'mlp\.conv2\.1\.', 'ffn.conv2.bn.'),
    ('', ''),  # norm1, norm2, attn.{q,k,v,proj}: same names
)] + [
    (r'^stem_conv(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.conv.'),
    (r'^stem_norm(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.bn.'),
    (r'^patch_embed_([a-d])\.', _stage('patch_embed.')),
    (r'^relative_pos_([a-d])$', _stage('relative_pos')),
    (r'^_fc\.', 'cls_proj.conv.'),
    (r'^_bn\.', 'cls_proj.bn.'),
]

register_format(WeightFormat(
    'cmt-official', 'cmt', has_key_matching(r'relative_pos_a$'),
    lambda sd: regex_rename(sd, OFFICIAL_RULES),
    'huawei-noah/Efficient-AI-Backbones cmt_pytorch (a plain state dict or {"model": ...})'))
register_format(WeightFormat(
    'cmt-ours', 'cmt', has_key_matching(r'stages\.0\.relative_pos$'), dict,
    "this project's layout (CMTModel().state_dict(), CMT().state_dict())"))

# timm's name for a model's pretrained-weights filter.
checkpoint_filter_fn = timm_checkpoint_filter


# -------------------------------------------------------------------------- timm entry points
def _cfg(checkpoint: str) -> dict:
    # The official evaluation (cmt_pytorch datasets.py): the short side to 256 / 224 x size,
    # a centre crop of size, bicubic. forward_features' map has stride 32.
    return timm_pretrained_cfg(checkpoint, first_conv=CMTModel.first_conv, crop_pct=224 / 256,
                               pool_stride=32)


PRETRAINED_CFGS = {
    'cmt_ti.in1k': _cfg('cmt-tiny'),
    'cmt_xs.in1k': _cfg('cmt-xs'),
    'cmt_s.in1k': _cfg('cmt-small'),
    'cmt_b.in1k': _cfg('cmt-base'),
}


def cmt_ti(pretrained: bool = False, **kwargs) -> CMTModel:
    """CMT-Ti (9.5 M parameters), ImageNet-1k at 160 (79.0 top-1): timm's entry point,
    ``timm.create_model('cmt_ti')`` once ``cvt_mm`` is imported.

    Args:
        pretrained (bool): load the published weights (``cmt_ti.in1k``, downloaded once).
            Default False.
        **kwargs: timm's (``num_classes``, ``features_only``, ``out_indices``, ...) and
            :class:`CMTModel`'s arguments.

    Returns:
        CMTModel: the model (timm's feature wrapper with ``features_only=True``).

    Example::

        >>> import timm
        >>> model = timm.create_model('cmt_ti', features_only=True).eval()
        >>> [tuple(f.shape) for f in model(torch.randn(1, 3, 160, 160))]
        [(1, 46, 40, 40), (1, 92, 20, 20), (1, 184, 10, 10), (1, 368, 5, 5)]
    """
    return build_timm_model(CMTModel, 'cmt_ti', pretrained, 'ti', NUM_STAGES, **kwargs)


def cmt_xs(pretrained: bool = False, **kwargs) -> CMTModel:
    """CMT-XS (15.2 M parameters), ImageNet-1k at 192 (81.8 top-1);
    arguments (``pretrained``, ...) as :func:`cmt_ti`."""
    return build_timm_model(CMTModel, 'cmt_xs', pretrained, 'xs', NUM_STAGES, **kwargs)


def cmt_s(pretrained: bool = False, **kwargs) -> CMTModel:
    """CMT-S (26.3 M parameters), ImageNet-1k at 224 (83.5 top-1);
    arguments (``pretrained``, ...) as :func:`cmt_ti`."""
    return build_timm_model(CMTModel, 'cmt_s', pretrained, 's', NUM_STAGES, **kwargs)


def cmt_b(pretrained: bool = False, **kwargs) -> CMTModel:
    """CMT-B (45.7 M parameters), ImageNet-1k at 256 (84.5 top-1);
    arguments (``pretrained``, ...) as :func:`cmt_ti`."""
    return build_timm_model(CMTModel, 'cmt_b', pretrained, 'b', NUM_STAGES, **kwargs)


# ---------------------------------------------------------------------------- registrations
register_mmengine(CMT)
# Leaves of timm's fx tracing (torchvision's feature extraction): each reads sizes as ints,
# keeps Python state or runs an autograd Function, so it is kept as one call or module.
register_timm(__name__, [cmt_ti, cmt_xs, cmt_s, cmt_b], PRETRAINED_CFGS,
              notrace_functions=[check_cmt_input, nlc_to_nchw, pad_to_multiple, sdpa_attention,
                                 interpolate_relative_pos],
              notrace_modules=[RelativePositionBias])
