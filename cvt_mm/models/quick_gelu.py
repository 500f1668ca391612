"""QuickGELU, ``x * sigmoid(1.702 x)``: the activation the official CvT weights were trained
with, as its formula (:class:`QuickGELU`) and as CvT's MLP computes it
(:class:`InplaceQuickGELU`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# QuickGELU(x) = x * sigmoid(a x) = silu(a x) / a.
QUICK_GELU_SCALE = 1.702


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 x)``.

    Example::

        >>> QuickGELU()(torch.zeros(3))
        tensor([0., 0., 0.])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(QUICK_GELU_SCALE * x)


class InplaceQuickGELU(nn.Module):
    """QuickGELU computed as ``silu(a x) / a`` with ``a x`` and ``/ a`` in place: one new
    tensor and one fused pass (``silu``) forward, where ``x * sigmoid(a x)`` allocates three
    and keeps two of them for a longer backward (docs/benchmarks.md). The same values and
    gradients as :class:`QuickGELU` to float rounding.

    It overwrites its input, so it is for a tensor that nothing else reads and that no
    backward keeps: a ``Linear``'s output (its backward keeps its input and weight, and
    ``silu`` keeps its own input, not its output), as in CvT's ``Mlp``.

    Example::

        >>> h = torch.randn(2, 8)
        >>> torch.allclose(InplaceQuickGELU()(h.clone()), QuickGELU()(h))
        True
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x.mul_(QUICK_GELU_SCALE)).div_(QUICK_GELU_SCALE)
