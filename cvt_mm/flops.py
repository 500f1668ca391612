"""Counting the floating-point work of a model run, attention included.

PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts matrix products and
convolutions as they execute (so it follows whatever a forward actually computes, at any input
size, forward and backward), but it has no formula for the fused CPU attention kernel that
``scaled_dot_product_attention`` runs on this machine: without one, attention (73 % of
CvT-13's work at 800x1333) would silently count as zero. :func:`count_flops` adds it.

Conventions: ``flops`` counts a multiply-add as 2 (what GFLOP/s rates use); MMDetection's and
the papers' "FLOPs" are multiply-adds, :attr:`FlopCount.gmacs`. Element-wise operations
(norms, activations, softmax) and mmcv's custom operators (RoIAlign) are not counted, as in
MMEngine's and fvcore's counters.

Example::

    >>> from cvt_mm.models.cvt import CvT
    >>> model = CvT(arch='13', out_type='logits').eval()
    >>> with torch.no_grad():
    ...     count = count_flops(model, torch.randn(1, 3, 224, 224))
    >>> round(count.gmacs, 2)  # the paper's 4.5G, of which attention 0.7G
    4.59
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict

import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    conv_flop_count,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

aten = torch.ops.aten


def _cpu_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward(grad_out_shape, query_shape, key_shape, value_shape, *args,
                            out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _conv_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation,
                   transposed, _output_padding, _groups, output_mask, out_shape=None, **kwargs):
    # The input gradient and the weight gradient each pair every output position with every
    # weight element once: the forward's count each. PyTorch's formula re-derives them as
    # convolutions but drops ``groups``, counting a depth-wise conv's backward 65x too high
    # for CMT's 64-channel maps (CMT-S training would count 15x its forward instead of 3x).
    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


# Formulas PyTorch's counter lacks (the fused CPU attention kernels; it has the CUDA ones)
# or gets wrong (grouped convolutions' backward).
EXTRA_FORMULAS = {
    aten.convolution_backward: _conv_backward,
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
}


@dataclass
class FlopCount:
    """What :func:`count_flops` measured: ``flops`` (multiply-add = 2) and ``by_op`` (aten
    operator name -> flops)."""
    flops: int
    by_op: Dict[str, int] = field(default_factory=dict)

    @property
    def gflops(self) -> float:
        return self.flops / 1e9

    @property
    def gmacs(self) -> float:
        """Multiply-adds, the "FLOPs" of MMDetection's tool and of the papers."""
        return self.flops / 2e9

    def attention_share(self) -> float:
        attention = sum(v for k, v in self.by_op.items() if 'attention' in k)
        return attention / self.flops if self.flops else 0.0


def counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` that also counts the fused CPU attention kernels."""
    return FlopCounterMode(display=False, custom_mapping=dict(EXTRA_FORMULAS))


def count_flops(fn: Callable, *args, **kwargs) -> FlopCount:
    """Run ``fn(*args, **kwargs)`` once and count its work. Whatever runs inside is counted:
    call ``.backward()`` in ``fn`` to include the backward pass; wrap it in
    ``torch.no_grad()`` for an inference count."""
    with counter() as mode:
        fn(*args, **kwargs)
    by_op = {str(op).replace('aten.', ''): n
             for op, n in mode.get_flop_counts().get('Global', {}).items()}
    return FlopCount(mode.get_total_flops(), by_op)
