"""Resizing and pooling written as products with per-axis matrices, for CMT's relative
position biases and for ONNX export: always used, whatever the fast-path switch says, by the
checkpoint bias resampling (:mod:`.pos_embed_rel`), CMT's bias on the fast path
(:mod:`.fast.relative_position_bias`) and ONNX export (``cvt_mm.apis.deployment``).

Both the bicubic resize of a bias (CMT, every step at a new resolution) and adaptive average
pooling (UperNet's pyramid pooling, exported with dynamic sizes) are linear maps along each
axis: ``A_h @ X @ A_w.T``. As matrices they run at GEMM speed, differentiate exactly through
autograd, and stay correct in an exported graph at any size, where the matrices are then
built from the (symbolic) sizes by tensor operations.

Example::

    >>> a = bicubic_matrix(7, 12)   # (12, 7): F.interpolate's bicubic weights
    >>> bias = resize_relative_pos(bias, (7, 7), (1, 1), (12, 12), (2, 2))
"""
from __future__ import annotations

import functools
from typing import Tuple

import torch
import torch.nn.functional as F

from .layers import is_symbolic

__all__ = ['bicubic_matrix', 'graph_bicubic_matrix', 'axis_matrix',
           'resize_grid_axis', 'resize_relative_pos', 'pool_matrix', 'matrix_adaptive_avg_pool']

Grid = Tuple[int, int]


@functools.lru_cache(maxsize=128)
def bicubic_matrix(src: int, dst: int) -> torch.Tensor:
    """``(dst, src)`` float64 weights of ``F.interpolate``'s bicubic resize along one axis
    (``align_corners=False``, borders clamped), read off by resizing the identity: the 2-D
    bicubic resize of a map ``X`` is ``A_h @ X @ A_w.T``."""
    eye = torch.eye(src, dtype=torch.float64).reshape(src, 1, src, 1)
    cols = F.interpolate(eye, size=(dst, 1), mode='bicubic', align_corners=False)
    return cols.reshape(src, dst).t().contiguous()


def graph_bicubic_matrix(src: int, dst, like: torch.Tensor) -> torch.Tensor:
    """:func:`bicubic_matrix` computed by tensor operations alone, in float32 (which ONNX
    Runtime's ``Resize`` takes) and cast to ``like``'s dtype, for a ``dst`` that may be a
    symbolic size: ``torch.export`` records the resize of the identity, so an exported graph
    builds the matrix for the size it runs at.

    Args:
        src (int): length of the stored axis.
        dst (int | torch.SymInt): length to resize to.
        like (torch.Tensor): gives the dtype and device.

    Returns:
        torch.Tensor: ``(dst, src)`` weights.

    Example::

        >>> torch.allclose(graph_bicubic_matrix(7, 12, torch.zeros(())),
        ...                bicubic_matrix(7, 12).float(), atol=1e-5)
        True
    """
    eye = torch.eye(src, dtype=torch.float32, device=like.device).reshape(src, 1, src, 1)
    cols = F.interpolate(eye, size=(dst, 1), mode='bicubic', align_corners=False)
    # Indexed, not reshaped: a reshape merging a symbolic size makes torch.export guard on
    # divisibility it cannot prove (e.g. that ceil(H / 32) is not 1).
    return cols[:, 0, :, 0].t().to(like.dtype)


def axis_matrix(src: int, dst, like: torch.Tensor) -> torch.Tensor:
    # A symbolic size (dynamic-size export) cannot key the cache without fixing the size, so
    # the graph computes the matrix itself; multiplying by it stays a GEMM in the exported
    # graph too (a Resize node of the bias itself dominated ONNX Runtime's time:
    # docs/benchmarks.md).
    if is_symbolic(dst):
        return graph_bicubic_matrix(src, dst, like)
    return bicubic_matrix(src, dst).to(like)


def resize_grid_axis(x: torch.Tensor, src: Grid, dst: Grid) -> torch.Tensor:
    """Bicubic resize of ``x`` (..., h, w, n) over its (h, w) grid axes, as two matrix
    products (``n`` rides along as the fast axis)."""
    a_h = axis_matrix(src[0], dst[0], x)
    a_w = axis_matrix(src[1], dst[1], x)
    lead, n = x.shape[:-3], x.shape[-1]
    x = torch.matmul(a_w, x)  # (..., h, W, n)
    x = torch.matmul(a_h, x.reshape(*lead, src[0], dst[1] * n))  # (..., H, W * n)
    return x.reshape(*lead, dst[0], dst[1], n)


def resize_relative_pos(bias: torch.Tensor, src_query: Grid, src_key: Grid, dst_query: Grid,
                        dst_key: Grid) -> torch.Tensor:
    """Resize a ``(heads, Hq*Wq, Hk*Wk)`` bias to new query and key grids.

    Bicubic (``align_corners=False``, as ``F.interpolate``) over the key grid and over the
    query grid, written as products with per-axis interpolation matrices
    (:func:`bicubic_matrix`, cached per size): the same linear map as ``F.interpolate``'s,
    exact gradients through autograd, and GEMM speed (``F.interpolate`` is several times
    slower here: docs/benchmarks.md, "What changed"), which matters since training
    resizes on every step. Returns ``bias`` itself when both grids
    already match, so a checkpoint run at its own resolution computes exactly what it was
    trained with.

    Under ``torch.export`` with dynamic image sizes (ONNX export) the new grids are symbolic:
    both axes are then always resized (at an unchanged size the matrices are the identity),
    since comparing the grids would fix the image size of the graph, and the graph computes
    the matrices for the size it runs at (:func:`axis_matrix`).
    """
    heads, nq, nk = bias.shape
    if nq != src_query[0] * src_query[1] or nk != src_key[0] * src_key[1]:
        raise ValueError(f'relative_pos of shape {tuple(bias.shape)} does not match a '
                         f'{src_query} query grid and a {src_key} key grid')
    symbolic = is_symbolic(*dst_query, *dst_key)
    if not symbolic and tuple(src_query) == tuple(dst_query) \
            and tuple(src_key) == tuple(dst_key):
        return bias
    x = bias
    if symbolic or tuple(src_key) != tuple(dst_key):
        # Keys first, while there are few queries: (heads, Nq, hk, wk, 1).
        x = resize_grid_axis(x.reshape(heads, nq, *src_key, 1), src_key, dst_key)
        x = x.reshape(heads, nq, -1)
    if symbolic or tuple(src_query) != tuple(dst_query):
        # (heads, hq, wq, Nk): the result comes out in its final (heads, Nq, Nk) layout.
        x = resize_grid_axis(x.reshape(heads, *src_query, x.shape[-1]), src_query, dst_query)
        x = x.reshape(heads, dst_query[0] * dst_query[1], -1)
    return x.contiguous()


def pool_matrix(size, bins: int, like: torch.Tensor) -> torch.Tensor:
    """``(bins, size)`` averaging weights of adaptive pooling along one axis: bin ``o``
    averages ``[floor(o * size / bins), ceil((o + 1) * size / bins))``, as PyTorch's
    adaptive pooling. Built from tensor ops, so ``size`` may be symbolic."""
    index = torch.arange(size, device=like.device)
    o = torch.arange(bins, device=like.device)
    start = (o * size) // bins
    end = ((o + 1) * size + bins - 1) // bins
    inside = (index[None] >= start[:, None]) & (index[None] < end[:, None])
    return inside.to(like.dtype) / (end - start).to(like.dtype)[:, None]


def matrix_adaptive_avg_pool(x: torch.Tensor, output_size) -> torch.Tensor:
    """``F.adaptive_avg_pool2d`` as two products with averaging matrices."""
    out_h, out_w = output_size if isinstance(output_size, (tuple, list)) \
        else (output_size, output_size)
    out_h = x.shape[-2] if out_h is None else out_h
    out_w = x.shape[-1] if out_w is None else out_w
    rows = pool_matrix(x.shape[-2], out_h, x)
    cols = pool_matrix(x.shape[-1], out_w, x)
    return torch.matmul(torch.matmul(rows, x), cols.transpose(0, 1))
