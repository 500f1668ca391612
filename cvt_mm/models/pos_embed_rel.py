"""A relative position bias on other token grids than it was trained for (CMT's ``relative_pos``,
one full ``(heads, Hq*Wq, Hk*Wk)`` query x key table per stage), as timm keeps its position
embedding resampling (``timm.layers.pos_embed_rel``) beside, not inside, its models.

* :func:`interpolate_relative_pos`: the reference resize, ``F.interpolate`` (bicubic) over the
  key grid, then over the query grid. (The fast path computes the same linear map as matrix
  products: :func:`~.matrix_resize.resize_relative_pos`.)
* :func:`resample_checkpoint_bias`: a checkpoint's bias, trained on square images at another
  resolution, resized once to the grids a model stores.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F

from ..checkpoint.io import CheckpointError
from ..checkpoint.loading import log
from .matrix_resize import resize_relative_pos

__all__ = ['interpolate_relative_pos', 'square_grids_from_shape', 'resample_checkpoint_bias']

Grid = Tuple[int, int]


def interpolate_relative_pos(bias: torch.Tensor, src_query: Grid, src_key: Grid,
                             dst_query: Grid, dst_key: Grid) -> torch.Tensor:
    """A ``(heads, Hq*Wq, Hk*Wk)`` bias resized to new query and key grids: bicubic
    (``align_corners=False``) over the key grid, then over the query grid; ``bias`` itself when
    both grids match. Written for TorchScript too (grids indexed, not unpacked); a leaf of
    timm's fx tracing (registered with its notrace functions), as timm's own resampling.

    Example::

        >>> interpolate_relative_pos(torch.randn(2, 16, 4), (4, 4), (2, 2), (5, 6), (3, 3)).shape
        torch.Size([2, 30, 9])
    """
    if src_query[0] == dst_query[0] and src_query[1] == dst_query[1] \
            and src_key[0] == dst_key[0] and src_key[1] == dst_key[1]:
        return bias
    heads, nq = bias.shape[0], bias.shape[1]
    x = F.interpolate(bias.reshape(heads * nq, 1, src_key[0], src_key[1]),
                      size=[dst_key[0], dst_key[1]], mode='bicubic', align_corners=False)
    nk = dst_key[0] * dst_key[1]
    x = x.reshape(heads, src_query[0], src_query[1], nk).permute(0, 3, 1, 2)
    x = x.reshape(heads * nk, 1, src_query[0], src_query[1])
    x = F.interpolate(x, size=[dst_query[0], dst_query[1]], mode='bicubic', align_corners=False)
    return x.reshape(heads, nk, dst_query[0] * dst_query[1]).transpose(1, 2).contiguous()


def square_grids_from_shape(shape: Sequence[int]) -> Tuple[Grid, Grid]:
    """Query and key grids of a ``(heads, Nq, Nk)`` bias trained on square images (all
    official checkpoints); ``CheckpointError`` when a token count is not a square."""
    grids = []
    for n in shape[1:]:
        side = math.isqrt(n)
        if side * side != n:
            raise CheckpointError(
                f'relative_pos of shape {tuple(shape)}: {n} tokens is not a square grid, so '
                'the resolution it was trained at is unknown; only square training '
                'resolutions can be resized on loading')
        grids.append((side, side))
    return grids[0], grids[1]


def resample_checkpoint_bias(key: str, src: torch.Tensor, stored: torch.Tensor,
                             query_grid: Grid, key_grid: Grid) -> torch.Tensor:
    """The checkpoint tensor ``src`` of ``key`` as the model's parameter ``stored`` (its
    grids ``query_grid`` x ``key_grid``): ``src`` itself when the shapes match, else resized
    bicubically from the square grids its shape implies (logged). ``CheckpointError`` when the
    number of heads differs or a grid is not square."""
    if src.shape == stored.shape:
        return src
    if src.dim() != 3 or src.shape[0] != stored.shape[0]:
        raise CheckpointError(f'{key}: checkpoint {tuple(src.shape)} vs model '
                              f'{tuple(stored.shape)} (number of heads differs)')
    src_q, src_k = square_grids_from_shape(src.shape)
    log(f'{key}: resized from query grid {src_q} x key grid {src_k} to '
        f'{tuple(query_grid)} x {tuple(key_grid)} (bicubic)')
    return resize_relative_pos(src.float(), src_q, src_k, query_grid, key_grid).to(src.dtype)
