"""Linear layers that read the same input, run as one matrix product: CMT's key and value
projections of the reduced map (and the query's too where the map is not reduced).

The modules and their parameters stay as the paper and the checkpoints have them; only the
product is fused, so one GEMM of twice or three times the width replaces two or three
(fewer, larger calls: docs/benchmarks.md) and the input is read once, forward and backward.
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn


def shared_input_linears(x: torch.Tensor, *linears: nn.Linear) -> Tuple[torch.Tensor, ...]:
    """``tuple(linear(x) for linear in linears)``, computed by one ``F.linear`` with the
    weights (and biases) concatenated; the outputs are views of its result.

    Args:
        x (torch.Tensor): (..., in_features), the input all of ``linears`` read.
        *linears (nn.Linear): layers with ``in_features`` equal to ``x``'s last size, all
            with a bias or all without.

    Returns:
        tuple[torch.Tensor, ...]: one output per layer, (..., out_features of that layer).

    Example::

        >>> k, v = nn.Linear(8, 8), nn.Linear(8, 8)
        >>> x = torch.randn(2, 5, 8)
        >>> key, value = shared_input_linears(x, k, v)
        >>> torch.allclose(key, k(x)) and torch.allclose(value, v(x))
        True
    """
    if len(linears) == 1:
        return (linears[0](x), )
    weight = torch.cat([linear.weight for linear in linears])
    biases = [linear.bias for linear in linears]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        raise ValueError('shared_input_linears: either every layer has a bias or none has')
    bias = None if biases[0] is None else torch.cat(biases)
    out = F.linear(x, weight, bias)
    return out.split([linear.out_features for linear in linears], dim=-1)
