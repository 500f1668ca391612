"""Building blocks shared by the CvT and CMT backbones: activations and norms of the official
models, token/map layout changes, per-block drop-path rates, and running a stage's blocks
with optional activation checkpointing."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from einops import rearrange
from torch import nn


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``, the activation the official CvT weights were trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class FP32LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 whatever the input dtype (as official CvT does), which
    keeps AMP training numerically identical to fp32 in the normalisation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x.float(), self.normalized_shape,
                           None if self.weight is None else self.weight.float(),
                           None if self.bias is None else self.bias.float(), self.eps)
        return out.to(x.dtype)


def nchw_to_nlc(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H*W, C), a view. (``rearrange(x, 'b c h w -> b (h w) c')``
    would copy: it permutes before merging the spatial axes.)"""
    return x.flatten(2).transpose(1, 2)


def nlc_to_nchw(x: torch.Tensor, hw: Sequence[int]) -> torch.Tensor:
    """(B, H*W, C) -> (B, C, H, W), a view."""
    h, w = hw
    if x.shape[1] != h * w:
        raise ValueError(f'nlc_to_nchw: {x.shape[1]} tokens cannot form a {h}x{w} map')
    return rearrange(x, 'b (h w) c -> b c h w', h=h, w=w)


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


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, *args, with_cp: bool = False):
    """``x`` through ``blocks`` in order (each called as ``block(x, *args)``). ``with_cp``
    recomputes each block's activations in the backward pass instead of keeping them, only
    when a backward can follow (training mode with autograd on): elsewhere it would only cost
    time."""
    checkpointed = with_cp and blocks.training and torch.is_grad_enabled()
    for block in blocks:
        if checkpointed:
            x = cp.checkpoint(block, x, *args, use_reentrant=False)
        else:
            x = block(x, *args)
    return x
