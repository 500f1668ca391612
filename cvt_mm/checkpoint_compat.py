"""Make MMEngine 0.10.7 checkpoints loadable under torch >= 2.6 without unsafe unpickling.

MMEngine calls ``torch.load(path, map_location=...)`` without ``weights_only``; since torch 2.6
that means ``weights_only=True``, and the unpickler refuses the few non-tensor objects MMEngine
itself writes into a checkpoint (the message hub's ``HistoryBuffer`` with its numpy arrays, numpy
scalars in the runtime info), so ``--resume`` fails.

Rather than turning safe loading off (which would execute arbitrary pickled code from any
downloaded ``.pth``), we allow-list exactly those types with ``torch.serialization.
add_safe_globals``, and stop ``HistoryBuffer`` from pickling its default statistics methods
(written as ``getattr(HistoryBuffer, 'mean')``; ``getattr`` must stay forbidden). Every file is
still unpickled by the restricted unpickler; a checkpoint that carries any other object is refused
as before. Checkpoints written by plain MMEngine (without ``import cvt_mm``) still contain the
``getattr`` references and cannot be resumed safely; weights-only use of them is unaffected.
"""
from __future__ import annotations

import numpy as np
import torch
from mmengine.logging.history_buffer import HistoryBuffer

__all__ = ['MMENGINE_CHECKPOINT_GLOBALS', 'allow_mmengine_checkpoints']


def _numpy_globals() -> list:
    """The numpy callables and classes that pickling ndarrays and numpy scalars refers to."""
    core = getattr(np, '_core', None) or np.core  # numpy 2 renamed numpy.core
    objs = [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles dtypes as instances of per-type classes (Float64DType, ...).
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        objs += [getattr(dtypes, name) for name in dir(dtypes) if name.endswith('DType')]
    return objs


MMENGINE_CHECKPOINT_GLOBALS = [HistoryBuffer, *_numpy_globals()]


_DEFAULT_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_state(self) -> dict:
    """``HistoryBuffer.__getstate__`` without MMEngine's default statistics methods.

    MMEngine pickles its four default methods into every buffer, as
    ``getattr(HistoryBuffer, 'min')`` and so on. Safe loading must refuse the ``getattr``
    global, because it reaches any attribute of any allowed class. ``__setstate__``
    re-registers the defaults anyway, so only custom methods need pickling.
    """
    state = {k: v for k, v in self.__dict__.items() if k != 'statistics_methods'}
    custom = {k: v for k, v in self._statistics_methods.items() if k not in _DEFAULT_STATISTICS}
    if custom:
        state['statistics_methods'] = custom
    return state


def allow_mmengine_checkpoints() -> None:
    """Allow-list the types MMEngine writes into its own checkpoints (idempotent)."""
    torch.serialization.add_safe_globals(MMENGINE_CHECKPOINT_GLOBALS)
    HistoryBuffer.__getstate__ = _history_buffer_state


allow_mmengine_checkpoints()
