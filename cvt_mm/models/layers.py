"""Building blocks shared by CvT and CMT: the float32 LayerNorm of official CvT, QuickGELU,
stochastic depth fused with the residual sum, token/map and per-head layout changes, per-block
drop-path rates and the integer size arithmetic that stays exportable.

The forward path is plain tensor code that TorchScript compiles, torch.fx traces and
``torch.export`` exports: layouts are ``reshape``/``transpose`` (einops' ``rearrange`` is not
scriptable), sizes are read as ``x.shape[i]`` (symbolic under fx and export)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn


class ResidualDropPath(nn.Module):
    """``x + drop_path(branch)``: stochastic depth of a residual branch (whole samples' branches
    dropped with probability ``drop_prob``, kept ones scaled by ``1 / (1 - drop_prob)``, in
    training only), fused with the residual sum into one ``addcmul``, where a separate drop
    path and add take three passes over the tokens and two more backward. Draws the same
    random numbers as mmcv's/timm's ``DropPath``.

    Example::

        >>> add = ResidualDropPath(0.1).eval()
        >>> x, branch = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
        >>> torch.equal(add(x, branch), x + branch)
        True
    """

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        if not 0 <= drop_prob < 1:
            raise ValueError(f'drop_prob must be in [0, 1), got {drop_prob}')
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0 or not self.training:
            return x + branch
        keep = 1 - self.drop_prob
        shape = (branch.shape[0], ) + (1, ) * (branch.dim() - 1)
        # Out of place: selective recomputation caches the outputs of in-place operators.
        kept = torch.floor(keep + torch.rand(shape, dtype=branch.dtype, device=branch.device))
        return torch.addcmul(x, branch, kept / keep)

    def extra_repr(self) -> str:
        return f'drop_prob={self.drop_prob}'


# QuickGELU(x) = x * sigmoid(a x) = silu(a x) / a (the fast path's form: fast/quick_gelu.py).
QUICK_GELU_SCALE = 1.702


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, the activation the official CvT weights were trained with.

    Example::

        >>> QuickGELU()(torch.zeros(3))
        tensor([0., 0., 0.])
    """
    # A constant of the class: TorchScript reads no float from a module's globals.
    __constants__ = ['scale']
    scale = QUICK_GELU_SCALE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.scale * x)


class FP32LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 whatever the input dtype (as official CvT does), which
    keeps AMP training numerically identical to fp32 in the normalisation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x.float(), self.normalized_shape,
                           None if self.weight is None else self.weight.float(),
                           None if self.bias is None else self.bias.float(), self.eps)
        return out.to(x.dtype)


def nchw_to_nlc(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H*W, C), a view. (Permuting before merging the spatial axes, as
    ``rearrange(x, 'b c h w -> b (h w) c')`` does, would copy.)"""
    return x.flatten(2).transpose(1, 2)


def nlc_to_nchw(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """(B, H*W, C) -> (B, C, H, W), a channels-last view. A leaf of timm's fx tracing
    (registered with its notrace functions): the check compares sizes."""
    h, w = hw[0], hw[1]
    if x.shape[1] != h * w:
        raise ValueError(f'nlc_to_nchw: {x.shape[1]} tokens cannot form a {h}x{w} map')
    # Split the tokens, then permute: the view's batch stride stays H*W*C. Transposing first
    # and reshaping gives a batch of one the stride C, which the CPU convolutions do not take
    # as channels-last: they copied the map and ran the NCHW kernels, 10-15x slower a conv
    # (CMT-S at 800x1333, batch 1: 1.2x the whole forward; issue 60).
    return x.reshape(x.shape[0], h, w, x.shape[2]).permute(0, 3, 1, 2)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, heads * d) tokens -> (B, heads, N, d) per-head tokens, a view."""
    return x.reshape(x.shape[0], x.shape[1], num_heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, d) -> (B, N, heads * d), the inverse of :func:`split_heads` (a copy
    unless the layout allows a view)."""
    return x.transpose(1, 2).flatten(2)


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``a, b >= 0``, also for symbolic sizes."""
    # Only non-negative operands: ONNX exports a symbolic `//` as integer Div, which truncates,
    # so `-(-a // b)` would round the wrong way in an exported graph.
    return (a + b - 1) // b


def is_symbolic(*sizes) -> bool:
    """Whether any size is a ``torch.SymInt``: a dimension that ``torch.export`` (or
    ``torch.compile(dynamic=True)``) keeps symbolic. Eager sizes are plain ints."""
    return any(isinstance(s, torch.SymInt) for s in sizes)


def split_tokens(x: torch.Tensor, num_leading: int) -> List[torch.Tensor]:
    """(B, N, C) tokens -> the first ``num_leading`` (e.g. a cls token) and the rest, as
    views. One ``split``, not two slices: its backward writes both gradients into one new
    tensor, where each slice's backward zero-fills a tensor of the full size.

    Example::

        >>> cls_token, tokens = split_tokens(torch.randn(2, 1 + 49, 8), 1)
        >>> tuple(cls_token.shape), tuple(tokens.shape)
        ((2, 1, 8), (2, 49, 8))
    """
    return x.split([num_leading, x.shape[1] - num_leading], dim=1)


def stochastic_depth_rates(total_rate: float, depths: Sequence[int]) -> list:
    """Per-block drop-path rates rising linearly from 0 to ``total_rate`` over all blocks
    (the Swin/PVT/CMT convention), returned as one list per stage.

    Example::

        >>> stochastic_depth_rates(0.2, [1, 2])
        [[0.0], [0.1, 0.2]]
    """
    total = sum(depths)
    # On the CPU explicitly, so that building under `with torch.device('meta')` works.
    rates = torch.linspace(0, total_rate, total, device='cpu').tolist() if total > 0 else []
    out, start = [], 0
    for d in depths:
        out.append(rates[start:start + d])
        start += d
    return out
