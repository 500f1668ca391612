"""A CMT stage's relative position bias at the size of each input: resized from the grids its
parameter is stored for, cached across eval-mode passes, and, under selective recomputation,
rebuilt in the backward pass instead of being kept from the forward.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from contextlib import nullcontext
from typing import Tuple

import torch
from torch import nn

from ...compat import is_compiling
from ..matrix_resize import resize_relative_pos
from ..recomputation import RecomputedInBackward

Grid = Tuple[int, int]


class RelativePositionBias(nn.Module):
    """Serves a ``(heads, Hq*Wq, Hk*Wk)`` relative position bias, stored for ``query_grid`` x
    ``key_grid``, at the query and key grids of an input.

    * **Resizing**: bicubic, :func:`~cvt_mm.models.matrix_resize.resize_relative_pos`; at the
      stored grids the parameter itself is returned.
    * **Caching**: in eval mode, when no gradient to the parameter is wanted, the resized
      bias is kept per (query grid, key grid), the ``cache_size`` most recently used ones;
      the cache is dropped on ``train()``/``eval()`` and an entry is not used once the
      parameter was replaced or updated in place (``load_state_dict``, an optimizer step).
    * **Recomputation** (``recompute_in_backward``): a resized bias is the largest tensor of
      a stage at detection sizes and every block saves it for the backward;
      :meth:`recomputed_in_backward` lets the backward rebuild it from the parameter once per
      stage instead (:class:`~cvt_mm.models.recomputation.RecomputedInBackward`).

    The module holds no parameter or buffer: the stage owns ``relative_pos`` and passes it in,
    so the checkpoint key stays ``stages.{i}.relative_pos``. A scripted model does not call it
    (the cache is Python state; ``CMTStage.relative_pos_for`` takes the reference resize
    there), and torch.fx keeps it as a leaf (registered with timm's notrace modules).

    Args:
        query_grid (tuple[int, int]): the query grid the parameter is stored for.
        key_grid (tuple[int, int]): the key grid the parameter is stored for.
        cache_size (int): resized biases kept in eval mode; 0 caches nothing. Default 2.
        recompute_in_backward (bool): see :meth:`recomputed_in_backward`. Default False.

    Example::

        >>> relative_pos = nn.Parameter(torch.randn(2, 16, 4))   # 4x4 queries, 2x2 keys
        >>> bias = RelativePositionBias((4, 4), (2, 2)).eval()
        >>> with torch.no_grad():
        ...     bias(relative_pos, (5, 6), (3, 3)).shape
        torch.Size([2, 30, 9])
        >>> bias(relative_pos, (4, 4), (2, 2)) is relative_pos
        True
    """

    def __init__(self, query_grid: Grid, key_grid: Grid, cache_size: int = 2,
                 recompute_in_backward: bool = False):
        super().__init__()
        if not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f'cache_size must be an int >= 0, got {cache_size!r}')
        self.query_grid, self.key_grid = tuple(query_grid), tuple(key_grid)
        self.cache_size = cache_size
        self.recompute_in_backward = recompute_in_backward
        # (query grid, key grid) -> ((pointer, version, dtype, device) of the parameter, bias)
        self._cache: OrderedDict = OrderedDict()

    # What TorchScript leaves uncompiled in a scripted model (see the class doc).
    __jit_unused_properties__ = ['cached_grids']

    def train(self, mode: bool = True):
        self._cache.clear()
        return super().train(mode)

    @property
    def cached_grids(self) -> list:
        """The (query grid, key grid) pairs whose resized bias is cached, least recently
        used first."""
        return list(self._cache)

    def resize(self, relative_pos: torch.Tensor, query_grid: Grid,
               key_grid: Grid) -> torch.Tensor:
        """``relative_pos`` resized to the given grids, without the cache."""
        return resize_relative_pos(relative_pos, self.query_grid, self.key_grid, query_grid,
                                   key_grid)

    @torch.jit.unused
    def forward(self, relative_pos: torch.Tensor, query_grid: Grid,
                key_grid: Grid) -> torch.Tensor:
        """``relative_pos`` at the given grids, from the cache where it may serve."""
        # Reusing a tensor built without autograd would cut the gradient to the parameter,
        # so the cache serves only eval-mode passes that do not need that gradient. Under
        # torch.compile the resize is part of the graph (the pointer checks would break it).
        cacheable = (not self.training and self.cache_size > 0
                     and not (torch.is_grad_enabled() and relative_pos.requires_grad)
                     and not is_compiling())
        if not cacheable:
            return self.resize(relative_pos, query_grid, key_grid)
        grids = (tuple(query_grid), tuple(key_grid))
        source = (relative_pos.data_ptr(), relative_pos._version, relative_pos.dtype,
                  relative_pos.device)
        hit = self._cache.get(grids)
        if hit is not None and hit[0] == source:
            self._cache.move_to_end(grids)
            return hit[1]
        bias = self.resize(relative_pos, *grids)
        self._cache[grids] = (source, bias)
        self._cache.move_to_end(grids)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return bias

    def recomputed_in_backward(self, bias: torch.Tensor, relative_pos: torch.Tensor,
                               query_grid: Grid, key_grid: Grid):
        """A context within which the tensors autograd saves that are views of ``bias`` (what
        :meth:`forward` returned for these grids) are not kept: the backward resizes
        ``relative_pos`` again. Does nothing unless ``recompute_in_backward``, in training
        with autograd on, for a resized bias, and outside ``torch.compile``.

        Example::

            >>> bias = pos_bias(relative_pos, hw, key_grid)
            >>> with pos_bias.recomputed_in_backward(bias, relative_pos, hw, key_grid):
            ...     x = blocks(x, bias)
        """
        if not (self.recompute_in_backward and self.training and torch.is_grad_enabled()
                and bias is not relative_pos and not is_compiling()):
            return nullcontext()
        return RecomputedInBackward(
            bias, functools.partial(self.resize, relative_pos, query_grid, key_grid),
            sources=(relative_pos, ))

    def extra_repr(self) -> str:
        return (f'query_grid={self.query_grid}, key_grid={self.key_grid}, '
                f'cache_size={self.cache_size}, '
                f'recompute_in_backward={self.recompute_in_backward}')
