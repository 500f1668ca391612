"""Activation recomputation for the backbones' training step: running a stage's blocks with
whole-block checkpointing or selective recomputation (:func:`run_blocks`), and not keeping a
large tensor that the backward can rebuild from a small one (:class:`RecomputedInBackward`).

Both change what is stored for the backward pass, never a value or a gradient.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import torch
import torch.utils.checkpoint as cp
from torch import nn

from ..compat import aten_ops, autocast_state, is_compiling

aten = torch.ops.aten


# Operators whose outputs selective recomputation keeps: the products, which are costly to
# run again. Everything else in a block (norms, activations, residual adds, layout copies)
# costs a pass over memory and is recomputed in the backward instead of being stored.
# (Attention kernels by name: each torch release has its own set.)
KEPT_BY_SELECTIVE_CP = aten_ops(
    'convolution', 'mm', 'addmm', 'bmm', 'baddbmm',
    '_scaled_dot_product_flash_attention_for_cpu',
    '_scaled_dot_product_flash_attention', '_scaled_dot_product_efficient_attention',
    '_scaled_dot_product_cudnn_attention',
    '_scaled_dot_product_fused_attention_overrideable')
# BatchNorm in training mode updates its running statistics as a side effect that the schema
# does not declare: run again, it would update them twice.
_BATCH_NORMS = aten_ops('native_batch_norm', '_native_batch_norm_legit',
                        '_batch_norm_with_update', 'cudnn_batch_norm', 'miopen_batch_norm')
_BATCH_NORM_WITH_UPDATE = aten_ops('_batch_norm_with_update')


def _selective_cp_policy(ctx, func, *args, **kwargs) -> 'cp.CheckpointPolicy':
    packet = func.overloadpacket
    keep = (packet in KEPT_BY_SELECTIVE_CP
            # Operators that write to a tensor (BatchNorm's batch counter) are not run twice.
            or func._schema.is_mutable
            or (packet in _BATCH_NORMS and _batch_norm_training(func, args, kwargs)))
    return cp.CheckpointPolicy.MUST_SAVE if keep else cp.CheckpointPolicy.PREFER_RECOMPUTE


def _batch_norm_training(func, args, kwargs) -> bool:
    if func.overloadpacket in _BATCH_NORM_WITH_UPDATE:
        return True
    names = [a.name for a in func._schema.arguments]
    if 'training' not in names:  # _native_batch_norm_legit.no_stats: batch statistics only
        return False
    i = names.index('training')
    return bool(kwargs['training'] if 'training' in kwargs else args[i])


def selective_cp_contexts():
    """``context_fn`` of ``torch.utils.checkpoint`` for selective recomputation: the outputs
    of :data:`KEPT_BY_SELECTIVE_CP` (and of operators with side effects) are kept, all others
    are recomputed in the backward from them."""
    # Cache entries may be mutated after caching only by the BatchNorm batch counter (a
    # later forward before this backward, as in gradient accumulation), whose value nothing
    # here reads back.
    return cp.create_selective_checkpoint_contexts(_selective_cp_policy,
                                                   allow_cache_entry_mutation=True)


class RecomputedInBackward:
    """Within this context, tensors that autograd saves for the backward and that are views of
    ``tensor`` are not kept: the backward recomputes ``tensor`` by calling ``recompute()``
    (under no_grad and the autocast state of the forward), once for all the views that
    needed it, and drops it after the last. For a large tensor that is cheap to rebuild from
    a small one (CMT's resized position bias from its parameter): its memory is then held in
    the forward and in its part of the backward only, not in between.

    ``sources`` are the tensors ``recompute`` reads; modifying one in place between the
    forward and the backward is an error, as for any tensor saved for backward.

    Example::

        >>> bias = expand(param)            # large, saved by every block that uses it
        >>> with RecomputedInBackward(bias, lambda: expand(param), sources=(param,)):
        ...     x = blocks(x, bias)
    """

    def __init__(self, tensor: torch.Tensor, recompute, sources: Sequence[torch.Tensor] = ()):
        self._key = (tensor.untyped_storage().data_ptr(), tensor.device, tensor.dtype)
        self._offset = tensor.storage_offset()
        self._meta = (tensor.shape, tensor.stride(), tensor.dtype)
        self._recompute = recompute
        self._sources = [(s, s._version) for s in sources]
        device = tensor.device.type
        self._autocast = (device, *autocast_state(device))
        self._value = None
        self._pending = 0  # saved views not yet unpacked
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)

    def _pack(self, t: torch.Tensor):
        if (t.untyped_storage().data_ptr(), t.device, t.dtype) != self._key:
            return t
        self._pending += 1
        return _View(tuple(t.shape), t.stride(), t.storage_offset() - self._offset)

    def _unpack(self, packed):
        if not isinstance(packed, _View):
            return packed
        for source, version in self._sources:
            if source._version != version:
                raise RuntimeError(
                    'a tensor the backward recomputes a saved tensor from was modified in '
                    f'place after the forward (version {version} -> {source._version})')
        value = self._value
        if value is None:
            device, dtype, enabled = self._autocast
            with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=enabled):
                value = self._recompute().contiguous()
            if (value.shape, value.stride(), value.dtype) != self._meta:
                raise RuntimeError(f'recomputed {tuple(value.shape)} {value.dtype}, the forward '
                                   f'had {tuple(self._meta[0])} {self._meta[2]}')
        self._pending -= 1
        self._value = value if self._pending > 0 else None
        return value.as_strided(packed.size, packed.stride, packed.offset)


class _View(NamedTuple):
    size: tuple
    stride: tuple
    offset: int


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, *args, with_cp: bool = False,
               selective_cp: bool = False):
    """``x`` through ``blocks`` in order (each called as ``block(x, *args)``), only when a
    backward can follow (training mode with autograd on; elsewhere either option would only
    cost time):

    * ``with_cp`` recomputes each block's activations in the backward pass instead of
      keeping them;
    * ``selective_cp`` (without ``with_cp``, and not under ``torch.compile``, whose
      partitioner chooses what to keep) keeps only the outputs of each block's convolutions,
      matrix products and attention (:func:`selective_cp_contexts`) and recomputes the
      element-wise operators between them: a block's norm, activation and residual outputs
      are not stored. The same values and gradients (the recomputed operators are
      deterministic; random ones replay the forward's random state). A second backward
      through the same graph (``retain_graph=True``) raises.
    """
    training = blocks.training and torch.is_grad_enabled()
    if training and with_cp:
        run = functools.partial(cp.checkpoint, use_reentrant=False)
    elif training and selective_cp and not is_compiling():
        run = functools.partial(cp.checkpoint, use_reentrant=False,
                                context_fn=selective_cp_contexts)
    else:
        run = None
    for block in blocks:
        x = block(x, *args) if run is None else run(block, x, *args)
    return x
