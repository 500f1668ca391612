"""Multi-head attention of CvT and CMT, ``softmax(q kᵀ * scale + bias) v``: the formula as
written (:func:`reference_attention`, which the tests compare with) and the dispatch to the
fused kernels of :mod:`.fused_attention`, which the models run by default.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange

from .fused_attention import sdpa_attention


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, heads * d) tokens -> (B, heads, N, d) per-head tokens, a view."""
    return rearrange(x, 'b n (heads d) -> b heads n d', heads=num_heads)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, d) -> (B, N, heads * d), the inverse of :func:`split_heads`."""
    return rearrange(x, 'b heads n d -> b n (heads d)')


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                        bias: Optional[torch.Tensor] = None,
                        dropout_p: float = 0.0) -> torch.Tensor:
    """Plain softmax(q kᵀ * scale + bias) v on (B, heads, N, d) tensors. Materialises the full
    score matrix: for tests and for checking the fast path, not for detection resolutions."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    attn = scores.softmax(dim=-1)
    if dropout_p > 0:
        attn = F.dropout(attn, p=dropout_p)
    return torch.matmul(attn, v)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
              bias: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
              use_sdpa: bool = True) -> torch.Tensor:
    """``softmax(q kᵀ * scale + bias) v`` on (B, heads, N, d) tensors.

    Args:
        q, k, v (torch.Tensor): per-head queries, keys and values (:func:`split_heads`).
        scale (float): multiplies the scores before the softmax.
        bias (torch.Tensor, optional): added to the scores, broadcastable to
            (B, heads, Nq, Nk), e.g. CMT's (heads, Nq, Nk) relative position bias; cast to
            ``q``'s dtype. Default None.
        dropout_p (float): dropout on the attention probabilities. Default 0.
        use_sdpa (bool): the fused kernels (:func:`.fused_attention.sdpa_attention`);
            ``False`` runs :func:`reference_attention`. Default True.

    Example::

        >>> q = k = v = torch.randn(2, 4, 49, 16)
        >>> attention(q, k, v, 0.25, bias=torch.zeros(4, 49, 49)).shape
        torch.Size([2, 4, 49, 16])
    """
    if bias is not None:
        bias = bias.to(q.dtype)
    fn = sdpa_attention if use_sdpa else reference_attention
    return fn(q, k, v, scale, bias=bias, dropout_p=dropout_p)
