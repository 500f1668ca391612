"""Layers shared by the CvT and CMT backbones."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from einops import rearrange
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

# Above this many score elements per call (batch x heads x queries x keys) the attention is
# evaluated in query chunks, so no backend (CPU math fallback, autograd) ever holds the full
# score matrix. 2**26 fp32 elements = 256 MiB.
MAX_SCORE_ELEMENTS = 2 ** 26
# Scores per chunk in BiasGradAttention's backward: 2 MiB of fp32 probabilities stay in
# cache. Measured at CMT-S's stage 1 at 800x1333 (2 x 66,800 queries x 1,050 keys), backward
# seconds for 2**18 / 2**19 / 2**20 / 2**21 elements: 1.9 / 1.7 / 1.8 / 2.4 (math path 1.9,
# after a 1.5 s forward against the fused 0.4 s).
BACKWARD_CHUNK_SCORES = 2 ** 19


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


class BiasGradAttention(torch.autograd.Function):
    """``softmax(q kᵀ * scale + bias) v`` for a ``bias`` that needs a gradient, on the CPU.

    PyTorch's fused CPU attention kernel takes an additive mask but gives it no gradient, so
    ``scaled_dot_product_attention`` falls back to its unfused math path whenever the mask
    requires grad -- CMT's trained relative-position bias in every training step, which then
    keeps the full probability matrix for the backward (CMT-S stage 1 at 800x1333, batch 2:
    forward 1.5 s and 561 MB of probabilities, against 0.4 s fused). Here
    the forward runs the fused kernel on the detached bias and keeps only its output; the
    backward recomputes the probabilities ``query_rows`` queries at a time and returns the
    exact gradients of q, k, v and the bias (summed over the dimensions it was broadcast on).

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
        q, k, v, bias, out = ctx.saved_tensors
        scale, rows = ctx.scale, ctx.query_rows
        nq = q.shape[-2]
        # Sums over query chunks accumulate in at least float32 (inputs may be bf16/fp16).
        acc = dict(dtype=torch.promote_types(q.dtype, torch.float32), device=q.device)
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros(k.shape, **acc)
        grad_v = torch.zeros(v.shape, **acc)
        per_query_bias = bias.shape[-2] != 1
        # A per-query bias gets each chunk's rows written once; a broadcast one accumulates.
        grad_bias = (torch.empty if per_query_bias else torch.zeros)(bias.shape, **acc)
        # softmax backward: dS = P * (dP - rowsum(dP * P)), and rowsum(dP * P) = rowsum(dO * O).
        delta = (grad_out * out).sum(-1, keepdim=True)
        k_t, v_t = k.transpose(-2, -1), v.transpose(-2, -1)
        for start in range(0, nq, rows):
            rs = slice(start, min(start + rows, nq))
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


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                   bias: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                   max_score_elements: int = MAX_SCORE_ELEMENTS) -> torch.Tensor:
    """``scaled_dot_product_attention`` with an explicit ``scale`` and optional additive
    ``bias`` (broadcastable to (B, heads, Nq, Nk)).

    On the CPU, the fused kernel runs in one call (it never builds the score matrix), also
    for a bias that needs a gradient (:class:`BiasGradAttention`). Elsewhere the queries are
    split into chunks of at most ``max_score_elements`` scores, which bounds the memory of
    a math fallback; chunks are independent rows of the softmax, so the result is the same.

    Under ``torch.export`` (ONNX export) it is one plain ``scaled_dot_product_attention``:
    the chunk sizes depend on the (symbolic) shapes and :class:`BiasGradAttention` serves
    only training, and the exported graph's runtime picks its own attention kernels.
    """
    if torch.compiler.is_exporting():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)
    b, h, nq, _ = q.shape
    nk = k.shape[-2]
    if q.device.type == 'cpu' and dropout_p == 0:
        if bias is not None and bias.requires_grad and torch.is_grad_enabled():
            backward_rows = max(1, BACKWARD_CHUNK_SCORES // max(1, b * h * nk))
            return BiasGradAttention.apply(q, k, v, bias, scale, backward_rows)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    rows = max(1, max_score_elements // max(1, b * h * nk))
    if nq <= rows:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=scale)
    if bias is not None and bias.dim() < 2:
        raise ValueError('attention bias must have a query and a key axis, got '
                         f'{tuple(bias.shape)}')
    outs = []
    for start in range(0, nq, rows):
        stop = min(start + rows, nq)
        chunk_bias = None
        if bias is not None:
            chunk_bias = bias if bias.shape[-2] == 1 else bias[..., start:stop, :]
        outs.append(F.scaled_dot_product_attention(q[:, :, start:stop], k, v,
                                                   attn_mask=chunk_bias,
                                                   dropout_p=dropout_p, scale=scale))
    return torch.cat(outs, dim=2)


def attention(q, k, v, scale, bias=None, dropout_p=0.0, use_sdpa=True):
    """Dispatch between the fused path (default) and the reference path."""
    fn = sdpa_attention if use_sdpa else reference_attention
    return fn(q, k, v, scale, bias=bias, dropout_p=dropout_p)


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


def check_choice(name: str, value, allowed) -> None:
    """``ValueError`` naming the option, the bad value and the allowed values."""
    if value not in allowed:
        raise ValueError(f'{name}={value!r} is not supported; allowed: '
                         f'{", ".join(repr(a) for a in allowed)}')


def check_indices(name: str, indices, num_stages: int) -> tuple:
    """Normalise ``out_indices``-style arguments (negatives count from the end)."""
    if isinstance(indices, int):
        indices = (indices, )
    try:
        indices = tuple(int(i) for i in indices)
    except TypeError:
        raise ValueError(f'{name} must be an int or a sequence of ints, got {indices!r}')
    if not indices:
        raise ValueError(f'{name} is empty; name at least one of the stages '
                         f'0..{num_stages - 1}')
    out = []
    for i in indices:
        j = i + num_stages if i < 0 else i
        if not 0 <= j < num_stages:
            raise ValueError(f'{name} contains {i}, but the model has {num_stages} stages '
                             f'(allowed: 0..{num_stages - 1} or -{num_stages}..-1)')
        out.append(j)
    if len(set(out)) != len(out):
        raise ValueError(f'{name}={indices!r} repeats a stage')
    return tuple(out)


def check_batchnorm_statistics(model: nn.Module, batch: int, smallest_map: Sequence[int],
                               where: str, min_side_for_batch_1: int) -> None:
    """BatchNorm in training mode needs more than one value per channel; raise a clear
    ``ValueError`` when ``batch`` images give its smallest normalised map (``where``,
    ``smallest_map`` = (h, w)) only one, instead of PyTorch's error from deep inside."""
    if batch * smallest_map[0] * smallest_map[1] > 1:
        return
    if not any(isinstance(m, _BatchNorm) and m.training for m in model.modules()):
        return
    raise ValueError(
        f'{type(model).__name__} cannot train on a batch of {batch} at this size: {where} is '
        f'{smallest_map[0]}x{smallest_map[1]}, so its BatchNorm sees one value per channel. '
        f'Use a batch of at least 2, inputs of at least {min_side_for_batch_1} pixels on one '
        'side, or norm_eval=True (BatchNorm on its running statistics).')


def unused_by_featmaps(out_type: str, out_indices: Sequence[int], stages: nn.ModuleList,
                       classification: Sequence[Optional[nn.Module]]) -> list:
    """What a backbone's ``'featmap'`` forward never runs: its classification stage and the
    stages after ``max(out_indices)``. Backbones keep them, so ``classify()`` and checkpoint
    loading work, but freeze them: DDP with ``find_unused_parameters=False`` would otherwise
    wait for their gradients and fail at the second iteration."""
    if out_type != 'featmap':
        return []
    return [m for m in classification if m is not None] + list(stages[max(out_indices) + 1:])


def freeze_modules(modules: Sequence[nn.Module]) -> None:
    """``frozen_stages``: eval mode (BatchNorm statistics included) and no gradients."""
    for module in modules:
        module.eval()
        for param in module.parameters():
            param.requires_grad = False


def batchnorm_eval(model: nn.Module) -> None:
    """``norm_eval``: every BatchNorm in eval mode, so its pretrained statistics stay."""
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.eval()


def vit_init_(module: nn.Module, std: float = 0.02) -> None:
    """The ViT initialisation of the official CvT and CMT code: truncated-normal Linear
    weights (``std``) with zero biases, unit-scale zero-shift norms. Convolutions are left
    as they are (PyTorch's default in the official CvT; CMT sets its own, see ``CMT``).

    Example::

        >>> vit_init_(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, _BatchNorm, nn.GroupNorm)):
            if m.weight is not None:
                nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def layer_depth(param_name: str, prefix: str, depths: Sequence[int]) -> tuple:
    """``(depth, num_layers)`` of a backbone parameter for layer-wise learning-rate decay,
    in MMPretrain's ``get_layer_depth`` convention (num_layers = blocks + 2): 0 for the stem
    and the first patch embedding; block ``j`` of stage ``s`` is ``1 + sum(depths[:s]) + j``;
    a later stage's patch embedding sits with the previous stage's last block (as Swin's
    downsampling); a stage's shared tensors (CMT's ``relative_pos``, CvT's ``cls_token``)
    with its first block; everything else (final norm, classifier, output norms, and any
    name outside ``prefix``: necks and heads) is the top, ``num_layers - 1``, at the full LR.

    Example::

        >>> layer_depth('backbone.stages.1.blocks.0.attn.q.weight', 'backbone.', [1, 2, 10])
        (2, 15)
    """
    num_layers = sum(depths) + 2
    if not param_name.startswith(prefix):
        return num_layers - 1, num_layers
    parts = param_name[len(prefix):].split('.')
    if parts[0] == 'stem':
        return 0, num_layers
    if parts[0] != 'stages' or len(parts) < 3:
        return num_layers - 1, num_layers
    stage = int(parts[1])
    before = sum(depths[:stage])
    if parts[2] == 'blocks':
        return 1 + before + int(parts[3]), num_layers
    if parts[2] == 'patch_embed':
        return before, num_layers
    return 1 + before, num_layers
