"""QuickGELU, ``x * sigmoid(1.702 x)`` (:class:`~cvt_mm.models.layers.QuickGELU`), as CvT's MLP
computes it on the fast path (:func:`fused_quick_gelu`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers import QUICK_GELU_SCALE


class _QuickGELUFunction(torch.autograd.Function):
    """``silu(a x) / a`` that keeps ``a x`` for a backward of one fused pass,
    ``silu_backward(grad, a x)`` (the ``a`` and ``1 / a`` cancel in the derivative)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        scaled = x * QUICK_GELU_SCALE
        ctx.save_for_backward(scaled)
        return F.silu(scaled).div_(QUICK_GELU_SCALE)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        scaled, = ctx.saved_tensors
        return torch.ops.aten.silu_backward(grad, scaled)


def fused_quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """:class:`~cvt_mm.models.layers.QuickGELU` as ``silu(a x) / a``: two passes forward
    (``a x``, then ``silu`` with ``/ a`` in place on its own output) and one backward
    (``silu_backward``), where ``x * sigmoid(a x)`` takes three passes and three tensors
    forward and keeps two of them for a longer backward (docs/benchmarks.md). Its input is
    left as it is: an in-place ``a x`` on a ``Linear``'s output, which is a view of the
    matrix product for 3-D tokens, costs autograd a zero-filled copy of the whole tensor and
    two more copies in the backward. The same values and gradients as :class:`QuickGELU` to
    float rounding. A leaf of timm's fx tracing (registered with its notrace functions): it
    asks whether autograd records.

    Example::

        >>> h = torch.randn(2, 8)
        >>> torch.allclose(fused_quick_gelu(h), QuickGELU()(h))
        True
    """
    if torch.is_grad_enabled() and x.requires_grad:
        return _QuickGELUFunction.apply(x)
    return F.silu(x * QUICK_GELU_SCALE).div_(QUICK_GELU_SCALE)
