"""PyTorch's fused ``scaled_dot_product_attention`` for CvT and CMT, the fast path of the
models' ``softmax(q kᵀ * scale + bias) v``: in one call on the CPU, where its kernel never builds
the score matrix, with an exact backward for CMT's trained position bias that keeps no
probabilities (:class:`BiasGradAttention`); in one call on CUDA too, where a fused kernel
(flash, memory-efficient, cuDNN) takes it; chunked over queries only where none does, so that
the unfused math fallback never holds the full score matrix of a large image.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ...compat import HAS_SYMBOLIC_SDPA, is_compiling, is_exporting

# Where no fused kernel takes the call, above this many score elements (batch x heads x queries
# x keys) the attention is evaluated in query chunks, so the math fallback (and its autograd)
# never holds the full score matrix. 2**26 fp32 elements = 256 MiB.
MAX_SCORE_ELEMENTS = 2 ** 26
# Scores per chunk in BiasGradAttention's backward: 2 MiB of fp32 probabilities stay in
# cache; the fastest of the sizes measured (docs/benchmarks.md, "What changed").
BACKWARD_CHUNK_SCORES = 2 ** 19


class BiasGradAttention(torch.autograd.Function):
    """``softmax(q kᵀ * scale + bias) v`` for a ``bias`` that needs a gradient, on the CPU.

    PyTorch's fused CPU attention kernel takes an additive mask but gives it no gradient, so
    ``scaled_dot_product_attention`` falls back to its unfused math path whenever the mask
    requires grad -- CMT's trained relative-position bias in every training step, which then
    keeps the full probability matrix for the backward (measured: docs/benchmarks.md, "What
    changed"). Here the forward runs the fused kernel on the detached bias and keeps only its
    output; the backward recomputes the probabilities ``query_rows`` queries at a time and
    returns the exact gradients of q, k, v and the bias (summed over the dimensions it was
    broadcast on).

    Example::

        >>> q, k, v = (torch.randn(2, 1, 64, 16, requires_grad=True) for _ in range(3))
        >>> bias = torch.randn(1, 1, 64, 64, requires_grad=True)
        >>> out = BiasGradAttention.apply(q, k, v, bias, 0.25, 32)
        >>> out.sum().backward()
        >>> bias.grad.shape
        torch.Size([1, 1, 64, 64])
    """

    @staticmethod
    def forward(ctx, q, k, v, bias, scale: float, query_rows: int):
        # Detached: the kernel choice looks at requires_grad, which the bias still reports
        # with autograd off in here.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.detach(), scale=scale)
        ctx.save_for_backward(q, k, v, bias, out)
        ctx.scale, ctx.query_rows = scale, query_rows
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q_in, k_in, v_in, bias, out = ctx.saved_tensors
        scale, rows = ctx.scale, ctx.query_rows
        nq = q_in.shape[-2]
        # Per-head views of token tensors are strided: each chunk's matmul would copy them
        # (and the transposed k, v) again, so they are copied once.
        q, k, v, grad_out = (t.contiguous() for t in (q_in, k_in, v_in, grad_out))
        # Sums over query chunks accumulate in at least float32 (inputs may be bf16/fp16).
        acc_dtype = torch.promote_types(q.dtype, torch.float32)
        acc = dict(dtype=acc_dtype, device=q.device)
        # Gradients in the inputs' layouts, so that merging the heads back is a view.
        grad_q = torch.empty_like(q_in)
        grad_k = torch.zeros_like(k_in, dtype=acc_dtype)
        grad_v = torch.zeros_like(v_in, dtype=acc_dtype)
        per_query_bias = bias.shape[-2] != 1
        # A per-query bias gets each chunk's rows written once; a broadcast one accumulates.
        grad_bias = (torch.empty if per_query_bias else torch.zeros)(bias.shape, **acc)
        # softmax backward: dS = P * (dP - rowsum(dP * P)), and rowsum(dP * P) = rowsum(dO * O).
        delta = (grad_out * out).sum(-1, keepdim=True)
        k_t, v_t = k.transpose(-2, -1), v.transpose(-2, -1)
        # Compiled, in one chunk: a loop over a symbolic query count would make the graph
        # guard on the count, so every new input size would recompile (and the compiler
        # schedules the memory itself).
        chunks = [slice(None)] if is_compiling() else \
            [slice(start, min(start + rows, nq)) for start in range(0, nq, rows)]
        for rs in chunks:
            q_c, grad_out_c = q[..., rs, :], grad_out[..., rs, :]
            bias_c = bias[..., rs, :] if per_query_bias else bias
            probs = torch.matmul(q_c, k_t).mul_(scale).add_(bias_c).softmax(dim=-1)
            grad_v += torch.matmul(probs.transpose(-2, -1), grad_out_c)
            grad_s = torch.matmul(grad_out_c, v_t).sub_(delta[..., rs, :]).mul_(probs)
            del probs
            grad_q[..., rs, :] = torch.matmul(grad_s, k).mul_(scale)
            grad_k += torch.matmul(grad_s.transpose(-2, -1), q_c).mul_(scale)
            reduced = grad_s.sum_to_size(*bias_c.shape)
            if per_query_bias:
                grad_bias[..., rs, :] = reduced
            else:
                grad_bias += reduced
        return (grad_q, grad_k.to(k.dtype), grad_v.to(v.dtype), grad_bias.to(bias.dtype),
                None, None)


def fused_cuda_kernel_takes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            bias: Optional[torch.Tensor], dropout_p: float) -> bool:
    """Whether one of PyTorch's fused CUDA attention kernels (flash, memory-efficient, cuDNN),
    none of which holds the score matrix, is enabled and accepts these inputs: the checks
    PyTorch's own dispatcher makes. ``False`` off CUDA."""
    if q.device.type != 'cuda':
        return False
    from torch.backends import cuda
    params = cuda.SDPAParams(q, k, v, bias, dropout_p, False, False)
    return any(enabled() and accepts(params) for enabled, accepts in (
        (cuda.flash_sdp_enabled, cuda.can_use_flash_attention),
        (cuda.mem_efficient_sdp_enabled, cuda.can_use_efficient_attention),
        (cuda.cudnn_sdp_enabled, cuda.can_use_cudnn_attention)))


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                   bias: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                   max_score_elements: int = MAX_SCORE_ELEMENTS) -> torch.Tensor:
    """``scaled_dot_product_attention`` with an explicit ``scale`` and optional additive
    ``bias`` (broadcastable to (B, heads, Nq, Nk)).

    On the CPU, the fused kernel runs in one call (it never builds the score matrix), also
    for a bias that needs a gradient (:class:`BiasGradAttention`); so on CUDA wherever a fused
    kernel takes the inputs (:func:`fused_cuda_kernel_takes`). Elsewhere the queries are split
    into chunks of at most ``max_score_elements`` scores, which bounds the memory of the math
    fallback; chunks are independent rows of the softmax, so the result is the same.

    Under ``torch.export`` (ONNX export) it is one plain ``scaled_dot_product_attention``:
    the chunk sizes depend on the (symbolic) shapes and :class:`BiasGradAttention` serves
    only training, and the exported graph's runtime picks its own attention kernels. Compiled
    on a torch whose fused attention cannot be traced at symbolic sizes (2.1), it is
    :func:`formula_attention`.
    """
    if bias is not None:
        bias = bias.to(q.dtype)
        # The kernels take their unfused math path for a 3-D mask, and for one that requires
        # grad (even under no_grad, where a view of a parameter still says it does).
        if bias.dim() == 3:
            bias = bias.unsqueeze(0)
        if not torch.is_grad_enabled():
            bias = bias.detach()
    if is_exporting():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)
    if torch.onnx.is_in_onnx_export():
        # TorchScript's ONNX exporter (torch.onnx.export(dynamo=False), which MMDeploy drives):
        # the formula. MMDeploy 1.3.1 rewrites scaled_dot_product_attention to divide the
        # scores by `scale` where PyTorch multiplies (docs/deployment.md, "MMDeploy").
        return formula_attention(q, k, v, scale, bias, dropout_p)
    if not HAS_SYMBOLIC_SDPA and is_compiling():
        # torch 2.1's fused attention cannot be traced at symbolic sizes (cvt_mm.compat): the
        # formula, which the compiler fuses itself.
        return formula_attention(q, k, v, scale, bias, dropout_p)
    b, h, nq, _ = q.shape
    nk = k.shape[-2]
    if q.device.type == 'cpu' and dropout_p == 0:
        if bias is not None and bias.requires_grad and torch.is_grad_enabled():
            backward_rows = max(1, BACKWARD_CHUNK_SCORES // max(1, b * h * nk))
            return BiasGradAttention.apply(q, k, v, bias, scale, backward_rows)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    rows = max(1, max_score_elements // max(1, b * h * nk))
    if nq <= rows or fused_cuda_kernel_takes(q, k, v, bias, dropout_p):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)
    return query_chunked_attention(q, k, v, scale, bias, dropout_p, rows)


def formula_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                      bias: Optional[torch.Tensor] = None, dropout_p: float = 0.0) -> torch.Tensor:
    """``softmax(q kᵀ * scale + bias) v`` as written (with dropout on the probabilities, as
    ``scaled_dot_product_attention`` drops them).

    Example::

        >>> q, k, v = (torch.randn(1, 2, 10, 8) for _ in range(3))
        >>> formula_attention(q, k, v, 0.35).shape
        torch.Size([1, 2, 10, 8])
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    probs = scores.softmax(dim=-1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return torch.matmul(probs, v)


def query_chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                            bias: Optional[torch.Tensor], dropout_p: float,
                            rows: int) -> torch.Tensor:
    """``scaled_dot_product_attention`` over ``rows`` queries at a time, concatenated: the
    same result (each query is its own softmax row), with at most ``rows`` rows of scores
    held at once by a kernel that builds them. ``bias``: 4-D, broadcastable to (B, heads,
    Nq, Nk); one of a single query row is shared by every chunk.

    Example::

        >>> q, k, v = (torch.randn(1, 2, 10, 8) for _ in range(3))
        >>> query_chunked_attention(q, k, v, 0.35, None, 0.0, rows=4).shape
        torch.Size([1, 2, 10, 8])
    """
    if bias is not None and bias.dim() < 2:
        raise ValueError('attention bias must have a query and a key axis, got '
                         f'{tuple(bias.shape)}')
    outs = []
    for start in range(0, q.shape[-2], rows):
        stop = start + rows
        chunk_bias = None
        if bias is not None:
            chunk_bias = bias if bias.shape[-2] == 1 else bias[..., start:stop, :]
        outs.append(F.scaled_dot_product_attention(q[:, :, start:stop], k, v,
                                                   attn_mask=chunk_bias,
                                                   dropout_p=dropout_p, scale=scale))
    return torch.cat(outs, dim=2)
