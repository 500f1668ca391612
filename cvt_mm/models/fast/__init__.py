"""Speed and memory machinery of the backbones, one step away from the models: only what the
switch selects.

``cvt.py`` and ``cmt.py`` read as the papers; each block with a fast path reads
:func:`use_fast_paths` when it is built into its own ``fast_path`` attribute and calls into
this package where that is on, as timm's ``Attention`` reads ``use_fused_attn()`` into
``fused_attn``. Every fast path computes what the reference path computes, to float rounding
(``tests/test_models/test_fast_paths.py``); why each exists and what it gains:
docs/benchmarks.md.

=============================  ================================================================
:mod:`.attention`              fused ``scaled_dot_product_attention``: one call on the CPU, an
                               exact gradient for CMT's trained bias, query chunks elsewhere
:mod:`.quick_gelu`             CvT's QuickGELU as ``silu(a x) / a``, one backward pass
:mod:`.relative_position_bias` CMT's bias at each input size: matrix resize, eval-mode cache,
                               recomputation in the backward
=============================  ================================================================

What runs whatever the switch says lives beside the models, and the reference path imports
nothing from here: the matrix resize (:mod:`cvt_mm.models.matrix_resize`, also what loads a
checkpoint's bias at another resolution and keeps an exported ONNX graph correct at any size)
and activation recomputation (:mod:`cvt_mm.models.recomputation`, asked for per model with
``with_cp`` and ``selective_cp``, since it trades time for memory).

**The switch.** :func:`use_fast_paths` is on, unless the environment sets
``CVT_MM_FAST_PATHS=0`` or :func:`set_fast_paths` turned it off; blocks built from then on take
its value. The reference path is attention as ``softmax(q kᵀ) v``, the plain QuickGELU,
``F.interpolate`` for CMT's bias and no bias cache. **One model's choice**: its
``set_fast_paths(False)`` (``CvTModel``, ``CMTModel``, the OpenMMLab backbones and the Hugging
Face models) sets every block's ``fast_path``, at any time, and ``fast_paths=False`` in the
constructor (an OpenMMLab config's ``backbone=dict(..., fast_paths=False)``) calls it after
building.

**Beyond eager.** A TorchScript-compiled model computes the reference formulas whatever its
blocks say (``torch.jit.is_scripting()``: the autograd Functions, the bias cache and the
recomputation are Python); torch.fx keeps each fast path as one call or module (timm's
notrace leaves, which the models register where timm is installed); ``torch.export`` takes the
fast paths (attention as one plain ``scaled_dot_product_attention``, the bias resize with
matrices built from symbolic sizes).

Example::

    >>> from cvt_mm.models import fast
    >>> fast.set_fast_paths(False)   # models built from now on take the reference path
    >>> fast.use_fast_paths()
    False
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ['use_fast_paths', 'set_fast_paths']

ENV_VAR = 'CVT_MM_FAST_PATHS'
_override: Optional[bool] = None


def use_fast_paths() -> bool:
    """Whether blocks built now take the fast paths (fused attention, fused QuickGELU, CMT's
    cached bias resize) or the formulas as written.

    Returns:
        bool: :func:`set_fast_paths`'s value when it was called, else the environment's
        ``CVT_MM_FAST_PATHS`` (``0``/``false`` turns them off), else True.

    Raises:
        ValueError: ``CVT_MM_FAST_PATHS`` is none of ``0``, ``1``, ``false``, ``true``.

    Example::

        >>> use_fast_paths()
        True
    """
    if _override is not None:
        return _override
    value = os.environ.get(ENV_VAR, '1').strip().lower()
    if value not in ('0', '1', 'false', 'true'):
        raise ValueError(f'{ENV_VAR}={value!r} is not understood; allowed: 0, 1, false, true')
    return value in ('1', 'true')


def set_fast_paths(enable: Optional[bool]) -> None:
    """Set whether models built from now on take the fast paths (a built model keeps its own:
    ``model.set_fast_paths(False)`` switches it).

    Args:
        enable (bool | None): True or False; None returns to the environment's default
            (:func:`use_fast_paths`).

    Raises:
        ValueError: ``enable`` is not True, False or None.

    Example::

        >>> from cvt_mm.models import CvTModel
        >>> set_fast_paths(False)
        >>> reference = CvTModel('13')  # the formulas as the paper writes them
        >>> set_fast_paths(None)
        >>> use_fast_paths()
        True
    """
    global _override
    if enable is not None and not isinstance(enable, bool):
        raise ValueError(f'set_fast_paths takes True, False or None, got {enable!r}')
    _override = enable
