"""Speed and memory machinery of the backbones, one step away from the models.

``cvt.py`` and ``cmt.py`` read as the papers; where a model's fast paths are on (the default)
they call into this package instead, as timm's models call fused attention behind
``use_fused_attn()``. Every fast path computes what the reference path computes, to float
rounding (``tests/test_models/test_fast_paths.py``); why each exists and what it gains:
docs/benchmarks.md.

=============================  ================================================================
:mod:`.attention`              fused ``scaled_dot_product_attention``: one call on the CPU, an
                               exact gradient for CMT's trained bias, query chunks elsewhere
:mod:`.quick_gelu`             CvT's QuickGELU as ``silu(a x) / a``, one backward pass
:mod:`.relative_position_bias` CMT's bias at each input size: matrix resize, eval-mode cache,
                               recomputation in the backward
:mod:`.matrix_resize`          bicubic resize and adaptive pooling as matrix products (also
                               what keeps an exported ONNX graph correct at any size)
:mod:`.recomputation`          whole-block and selective activation recomputation
=============================  ================================================================

**The switch.** A model built with ``fast_paths=None`` (the default) takes
:func:`use_fast_paths` at construction: on, unless the environment sets
``CVT_MM_FAST_PATHS=0`` or :func:`set_fast_paths` turned it off. ``fast_paths=False`` builds
one model on the reference path (attention as ``softmax(q kᵀ) v``, the plain QuickGELU,
``F.interpolate`` for CMT's bias, no bias cache). Activation recomputation is asked for per model
(``with_cp``, ``selective_cp``), since it trades time for memory.

**Beyond eager.** A TorchScript-compiled model computes the reference formulas whatever it was
built with (``torch.jit.is_scripting()``: the autograd Functions, the bias cache and the
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
    """Whether models built now take the fast paths: :func:`set_fast_paths`'s value when it was
    called, else ``CVT_MM_FAST_PATHS`` (``0`` turns them off), else ``True``."""
    if _override is not None:
        return _override
    value = os.environ.get(ENV_VAR, '1').strip().lower()
    if value not in ('0', '1', 'false', 'true'):
        raise ValueError(f'{ENV_VAR}={value!r} is not understood; allowed: 0, 1, false, true')
    return value in ('1', 'true')


def set_fast_paths(enable: Optional[bool]) -> None:
    """Set the default of models built from now on; ``None`` returns to the environment's."""
    global _override
    if enable is not None and not isinstance(enable, bool):
        raise ValueError(f'set_fast_paths takes True, False or None, got {enable!r}')
    _override = enable
