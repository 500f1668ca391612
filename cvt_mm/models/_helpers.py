"""What the CvT and CMT models share beyond their layers: argument checks that name what is
allowed, the arch tables (:func:`resolve_arch`), the official ViT initialisation, the checks of
an input image, the per-model choice of the fast paths (:func:`set_leaf_fast_paths`), and stage
indices in timm's convention (:func:`take_indices`).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['check_choice', 'check_int', 'resolve_arch', 'vit_init_', 'check_image',
           'batchnorm_trains', 'set_leaf_fast_paths', 'check_batchnorm_statistics',
           'take_indices']


def check_choice(name: str, value, allowed) -> None:
    """``ValueError`` naming the option, the bad value and the allowed values.

    Example::

        >>> check_choice('global_pool', 'max', ('token', ''))
        Traceback (most recent call last):
        ValueError: global_pool='max' is not supported; allowed: 'token', ''
    """
    if value not in allowed:
        raise ValueError(f'{name}={value!r} is not supported; allowed: '
                         f'{", ".join(repr(a) for a in allowed)}')


def check_int(owner: str, name: str, value, minimum: int, meaning: str = '') -> None:
    """``ValueError`` unless ``value`` is an int (not a bool) of at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = 'a positive int' if minimum == 1 else f'an int >= {minimum}'
        raise ValueError(f'{owner}: {name} must be {what}{meaning}, got {value!r}')


def resolve_arch(arch: Union[str, dict], zoo: Dict[str, dict], num_stages: int,
                 defaults: Optional[dict] = None,
                 required: Sequence[str] = ('embed_dims', 'num_heads', 'depths'),
                 per_stage: Sequence[str] = ('embed_dims', 'num_heads', 'depths')) -> dict:
    """The settings of ``arch``: a row of ``zoo`` by name, or a custom dict checked here
    (as MMPretrain's ``arch_zoo``: a variant is one row, a custom arch is a dict).

    Args:
        arch (str | dict): a key of ``zoo``, or a dict with the ``required`` keys and any of
            ``defaults``' keys.
        zoo (dict): published variants by name.
        num_stages (int): stages of the family: every ``per_stage`` value holds this many.
        defaults (dict, optional): the family's optional settings and their defaults, under
            zoo rows and custom dicts alike. Defaults to None.
        required (Sequence[str]): keys a custom dict must give.
        per_stage (Sequence[str]): keys holding one positive int per stage.

    Returns:
        dict: ``defaults`` updated with the row or the dict (lists copied).

    Example::

        >>> resolve_arch('13', CvTModel.arch_zoo, 3)['depths']
        [1, 2, 10]
    """
    defaults = dict(defaults or {})
    if isinstance(arch, str):
        check_choice('arch', arch, tuple(zoo))
        arch = zoo[arch]
    elif isinstance(arch, dict):
        allowed = set(required) | set(defaults)
        unknown = sorted(set(arch) - allowed)
        missing = [k for k in required if k not in arch]
        if unknown or missing:
            raise ValueError(f'arch dict: unknown keys {unknown}, missing keys {missing}; '
                             f'required: {list(required)}, optional: '
                             f'{sorted(allowed - set(required))}')
    else:
        raise ValueError(f'arch must be one of {", ".join(map(repr, zoo))} or a dict, '
                         f'got {type(arch).__name__}')
    cfg = {**defaults, **{k: list(v) if isinstance(v, (list, tuple)) else v
                          for k, v in arch.items()}}
    for key in per_stage:
        values = cfg[key]
        if len(values) != num_stages or not all(isinstance(v, int) and v > 0 for v in values):
            raise ValueError(f'arch[{key!r}] must hold {num_stages} positive ints, '
                             f'got {values!r}')
    for i, (dims, heads) in enumerate(zip(cfg['embed_dims'], cfg['num_heads'])):
        if dims % heads:
            raise ValueError(f'arch: stage {i}: embed_dims {dims} is not divisible by '
                             f'num_heads {heads}')
    return cfg


def vit_init_(module: nn.Module, std: float = 0.02, init=nn.init) -> None:
    """The ViT initialisation of the official CvT and CMT code, on ``module`` itself (not its
    children): truncated-normal Linear weights (``std``) with zero biases, unit-scale
    zero-shift norms, BatchNorm statistics reset. ``init`` provides ``trunc_normal_``,
    ``zeros_`` and ``ones_`` (``torch.nn.init``, or transformers' ``initialization``, which
    leaves loaded tensors alone).

    Example::

        >>> nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).apply(vit_init_)
    """
    if isinstance(module, nn.Linear):
        init.trunc_normal_(module.weight, std=std)
        if module.bias is not None:
            init.zeros_(module.bias)
    elif isinstance(module, (nn.LayerNorm, _BatchNorm, nn.GroupNorm)):
        if module.weight is not None:
            init.ones_(module.weight)
        if module.bias is not None:
            init.zeros_(module.bias)
        if isinstance(module, _BatchNorm) and module.running_mean is not None:
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)


def check_image(owner: Union[str, nn.Module], x: torch.Tensor, in_chans: int,
                min_size: int) -> None:
    """``ValueError`` unless ``x`` is a non-empty (B, in_chans, H, W) batch of images of at
    least ``min_size`` pixels a side; ``owner`` (a model or its name) names who says so."""
    name = owner if isinstance(owner, str) else type(owner).__name__
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f'{name} expects a (B, C, H, W) tensor, got '
                         f'{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x)}')
    if x.shape[0] == 0:
        raise ValueError(f'{name} got an empty batch (0 images)')
    if x.shape[1] != in_chans:
        raise ValueError(f'{name} was built for in_channels={in_chans}, '
                         f'got an input with {x.shape[1]} channels')
    # Each side on its own: min() of two sizes makes a compiled graph guard on which is the
    # smaller, so that a portrait input after a landscape one recompiles.
    if x.shape[2] < min_size or x.shape[3] < min_size:
        raise ValueError(f'{name} needs inputs of at least {min_size}x{min_size}, '
                         f'got {x.shape[2]}x{x.shape[3]}')


def batchnorm_trains(model: nn.Module) -> bool:
    """Whether a BatchNorm of ``model`` normalises with batch statistics (is in training
    mode)."""
    return any(isinstance(m, _BatchNorm) and m.training for m in model.modules())


def set_leaf_fast_paths(model: nn.Module, enable: bool) -> None:
    """Turn the fast paths of ``model``'s leaves on or off: every module with a ``fast_path``
    attribute (the blocks that read :func:`~.fast.use_fast_paths` when built, as timm's
    attention reads ``use_fused_attn()`` into ``fused_attn``) gets ``enable``. The weights
    stay as they are; only which code the next forward runs changes.

    Args:
        model (nn.Module): a model, or any module holding such leaves.
        enable (bool): ``True`` for the fast paths, ``False`` for the formulas as written.
    """
    if not isinstance(enable, bool):
        raise ValueError(f'set_fast_paths takes True or False, got {enable!r}')
    for module in model.modules():
        if hasattr(module, 'fast_path'):
            module.fast_path = enable


def check_batchnorm_statistics(owner: str, batch: int, smallest_map: Sequence[int],
                               where: str, min_side_for_batch_1: int) -> None:
    """BatchNorm in training mode needs more than one value per channel: for a model whose
    BatchNorms train (:func:`batchnorm_trains`), raise a clear ``ValueError`` when ``batch``
    images give its smallest normalised map (``where``, ``smallest_map`` = (h, w)) only one,
    instead of PyTorch's error from deep inside. ``owner``: the model's name."""
    if batch * smallest_map[0] * smallest_map[1] > 1:
        return
    raise ValueError(
        f'{owner} cannot train on a batch of {batch} at this size: {where} is '
        f'{smallest_map[0]}x{smallest_map[1]}, so its BatchNorm sees one value per channel. '
        f'Use a batch of at least 2, inputs of at least {min_side_for_batch_1} pixels on one '
        'side, or norm_eval=True (BatchNorm on its running statistics).')


def take_indices(num_stages: int, indices: Optional[Union[int, Sequence[int]]] = None,
                 name: str = 'indices') -> Tuple[List[int], int]:
    """Stage indices in timm's convention (``forward_intermediates``, ``features_only``'s
    ``out_indices``): ``None`` all stages, an int ``n`` the last ``n``, a sequence those stages
    (negatives count from the end). Returns them sorted, as the stages run, and the largest;
    a ``ValueError`` names the valid range.

    Example::

        >>> take_indices(3, -1), take_indices(4, 2), take_indices(3, (2, 0))
        (([2], 2), ([2, 3], 3), ([0, 2], 2))
    """
    if indices is None:
        indices = num_stages
    if isinstance(indices, int) and not isinstance(indices, bool):
        if not 0 < indices <= num_stages:
            raise ValueError(f'{name}={indices} (an int takes the last n stages) is out of '
                             f'range: the model has {num_stages} stages, so 1..{num_stages}')
        return list(range(num_stages - indices, num_stages)), num_stages - 1
    try:
        given = [int(i) for i in indices]
    except (TypeError, ValueError):
        raise ValueError(f'{name} must be None, an int or a sequence of ints, got {indices!r}')
    if not given:
        raise ValueError(f'{name} is empty; name at least one of the stages 0..{num_stages - 1}')
    out = []
    for i in given:
        j = i + num_stages if i < 0 else i
        if not 0 <= j < num_stages:
            raise ValueError(f'{name} contains {i}, but the model has {num_stages} stages '
                             f'(allowed: 0..{num_stages - 1} or -{num_stages}..-1)')
        out.append(j)
    if len(set(out)) != len(out):
        raise ValueError(f'{name}={tuple(given)} repeats a stage')
    return sorted(out), max(out)
