"""What the installed torch (2.1 to the newest) and transformers can do, asked here once, by
feature rather than by version string; the rest of the package asks this module.

=============================  =======  ==========================================================
feature                        torch    used by
=============================  =======  ==========================================================
``torch.load`` allow-list      2.5      :func:`safe_load` (before it: a restricted unpickler)
selective recomputation        2.4      ``selective_cp=True`` (before it: a clear error)
``torch.Generator`` pickles    2.4      nothing any more (the loops no longer copy one)
``get_autocast_dtype(device)`` 2.4      :func:`autocast_state`
``torch.compiler.is_compiling`` 2.3     :func:`is_compiling` (before it: ``torch._dynamo``'s)
``torch.compiler.is_exporting`` 2.6     :func:`is_exporting` (before it: never exporting)
``torch.onnx.export(dynamo=)`` 2.5      ONNX export (before it: a clear error)
transformers 5 (needs >= 2.6)  2.6      the Hugging Face classes (:func:`huggingface_unavailable`)
=============================  =======  ==========================================================

:func:`require` turns a missing feature into an ``ImportError``/``RuntimeError`` naming what
needs it and which torch has it. ``python -m cvt_mm.apis.collect_env`` prints this table for the
environment at hand.

Example::

    >>> from cvt_mm import compat
    >>> compat.safe_load('epoch_1.pth', extra_globals=[argparse.Namespace])['meta']
"""
from __future__ import annotations

import _codecs
import collections
import functools
import io
import pickle
import types
from typing import Iterable, Optional

import torch
import torch.utils.checkpoint as _cp

__all__ = ['FEATURES', 'has', 'require', 'aten_ops', 'is_compiling', 'is_exporting',
           'autocast_state', 'allow_in_safe_load', 'safe_load', 'restricted_load',
           'huggingface_unavailable', 'require_huggingface']

def _generator_pickles() -> bool:
    try:
        pickle.dumps(torch.Generator())
    except Exception:  # noqa: BLE001 - torch < 2.4: TypeError "cannot pickle"
        return False
    return True


def _onnx_dynamo() -> bool:
    import inspect
    try:
        return 'dynamo' in inspect.signature(torch.onnx.export).parameters
    except (TypeError, ValueError):
        return False


# Each feature once, as a constant the functions below read (the Hub folder's code copies the
# functions it needs with their constants: cvt_mm.models.remote_code).
HAS_SAFE_GLOBALS = hasattr(torch.serialization, 'safe_globals')
HAS_ADD_SAFE_GLOBALS = hasattr(torch.serialization, 'add_safe_globals')
HAS_SELECTIVE_CHECKPOINT = hasattr(_cp, 'create_selective_checkpoint_contexts')
HAS_AUTOCAST_DEVICE_API = hasattr(torch, 'get_autocast_dtype')
HAS_COMPILER_IS_COMPILING = hasattr(torch.compiler, 'is_compiling')
HAS_COMPILER_IS_EXPORTING = hasattr(torch.compiler, 'is_exporting')
HAS_ONNX_DYNAMO_EXPORT = _onnx_dynamo()
GENERATOR_PICKLES = _generator_pickles()

#: feature -> (whether this torch has it, the torch release that brought it)
FEATURES = {
    'safe_globals': (HAS_SAFE_GLOBALS, '2.5'),
    'selective_checkpoint': (HAS_SELECTIVE_CHECKPOINT, '2.4'),
    'generator_pickles': (GENERATOR_PICKLES, '2.4'),
    'autocast_device_api': (HAS_AUTOCAST_DEVICE_API, '2.4'),
    'compiler_is_compiling': (HAS_COMPILER_IS_COMPILING, '2.3'),
    'compiler_is_exporting': (HAS_COMPILER_IS_EXPORTING, '2.6'),
    'onnx_dynamo_export': (HAS_ONNX_DYNAMO_EXPORT, '2.5'),
}


def has(feature: str) -> bool:
    """Whether this torch has ``feature`` (a key of :data:`FEATURES`)."""
    if feature not in FEATURES:
        raise ValueError(f'unknown feature {feature!r}; known: {", ".join(FEATURES)}')
    return FEATURES[feature][0]


def require(present: bool, what: str, since: str) -> None:
    """Raise ``RuntimeError`` naming ``what`` needs torch >= ``since``, unless ``present`` (one
    of this module's ``HAS_*`` constants; passed in, so that the Hub folder's code copies only
    the check it uses).

    Example::

        >>> require(HAS_SELECTIVE_CHECKPOINT, 'selective_cp=True', '2.4')
        RuntimeError: selective_cp=True needs torch >= 2.4; this is torch 2.1.2+cu121. ...
    """
    if not present:
        raise RuntimeError(f'{what} needs torch >= {since}; this is torch {torch.__version__}. '
                           'docs/installation.md lists what each tested stack supports.')


def aten_ops(*names: str) -> frozenset:
    """The ``torch.ops.aten`` operator packets of ``names`` that this torch defines (kernels
    are added across releases, e.g. ``_scaled_dot_product_flash_attention_for_cpu`` in 2.2)."""
    found = set()
    for name in names:
        try:
            found.add(getattr(torch.ops.aten, name))
        except (AttributeError, RuntimeError):
            continue
    return frozenset(found)


def is_compiling() -> bool:
    """Whether Dynamo is tracing this call (``torch._dynamo``'s check before torch 2.3)."""
    if HAS_COMPILER_IS_COMPILING:
        return torch.compiler.is_compiling()
    return torch._dynamo.is_compiling()


def is_exporting() -> bool:
    """Whether ``torch.export`` is tracing this call; torch < 2.6 has no such check (then
    False: the fast paths' export branch is not taken)."""
    if HAS_COMPILER_IS_EXPORTING:
        return torch.compiler.is_exporting()
    return False


def autocast_state(device_type: str) -> tuple:
    """``(dtype, enabled)`` of autocast for ``device_type`` (``'cpu'``, ``'cuda'``, ...)."""
    if HAS_AUTOCAST_DEVICE_API:
        return torch.get_autocast_dtype(device_type), torch.is_autocast_enabled(device_type)
    if device_type == 'cpu':
        return torch.get_autocast_cpu_dtype(), torch.is_autocast_cpu_enabled()
    return torch.get_autocast_gpu_dtype(), torch.is_autocast_enabled()


# ------------------------------------------------------------------------ safe loading
_extra_globals: dict = {}


def _qualified(obj) -> str:
    return f'{obj.__module__}.{obj.__qualname__}'


def allow_in_safe_load(objs: Iterable) -> None:
    """Allow ``objs`` (classes, functions) in every :func:`safe_load` made by the restricted
    unpickler (torch < 2.5); torch's own allow-list is :mod:`cvt_mm.integration`'s to change."""
    _extra_globals.update({_qualified(o): o for o in objs})


# What torch's own allow-list gained after 2.1 (checked against 2.13's), for the files newer
# torch writes and reads safely: numpy scalars' bytes (protocol 2), sets, Counters (MMDetection's
# dataset state), devices; dtypes are taken by type below.
_LATER_ALLOWED = {'_codecs.encode': _codecs.encode, 'builtins.bytearray': bytearray,
                  'builtins.complex': complex, 'builtins.set': set,
                  'collections.Counter': collections.Counter, 'torch.device': torch.device}


@functools.lru_cache(maxsize=1)
def _torch_allowed_globals() -> dict:
    """torch's own ``weights_only`` allow-list, built once (not per global unpickled)."""
    from torch._weights_only_unpickler import _get_allowed_globals
    return _get_allowed_globals()


class _RestrictedUnpickler(pickle.Unpickler):
    """torch's own ``weights_only`` allow-list plus :func:`allow_in_safe_load` and this call's
    extras; any other global is refused, as ``weights_only=True`` refuses it."""
    extra: dict = {}

    def find_class(self, module: str, name: str):
        key = f'{module}.{name}'
        allowed = _torch_allowed_globals()
        if key in allowed:
            return allowed[key]
        if key in _extra_globals:
            return _extra_globals[key]
        if key in self.extra:
            return self.extra[key]
        if key in _LATER_ALLOWED:
            return _LATER_ALLOWED[key]
        if module == 'torch' and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == 'torch' and name.endswith('Storage'):  # legacy typed storages
            return getattr(torch, name)
        raise pickle.UnpicklingError(
            f'Weights only load failed: unsupported GLOBAL {key} (not on the allow-list)')


def _restricted_module(extra: dict) -> types.ModuleType:
    unpickler = type('RestrictedUnpickler', (_RestrictedUnpickler, ), {'extra': extra})
    module = types.ModuleType('cvt_mm_restricted_pickle')
    module.Unpickler = unpickler
    module.load = lambda f, **kw: unpickler(f, **kw).load()
    module.loads = lambda data, **kw: unpickler(io.BytesIO(data), **kw).load()
    module.__name__ = 'cvt_mm_restricted_pickle'
    return module


def safe_load(f, map_location='cpu', extra_globals: Iterable = (), mmap: bool = False):
    """``torch.load`` that runs no code from the file, on every supported torch: torch's
    ``weights_only=True`` with ``extra_globals`` allowed (torch >= 2.5), or, before torch had
    an allow-list, the same allow-list through a restricted unpickler. Never
    ``weights_only=False``.

    Args:
        f (str | file): what ``torch.load`` takes.
        map_location: as ``torch.load``. Defaults to ``'cpu'``.
        extra_globals (Iterable): classes allowed for this call besides torch's and
            :func:`allow_in_safe_load`'s.
        mmap (bool): memory-map a zip file (``torch.load(mmap=True)``). Defaults to False.
    """
    extra_globals = list(extra_globals)
    if HAS_SAFE_GLOBALS:
        mmap_kw = dict(mmap=True) if mmap else {}
        with torch.serialization.safe_globals(extra_globals):
            return torch.load(f, map_location=map_location, weights_only=True, **mmap_kw)
    return restricted_load(f, map_location, extra_globals, mmap)


def restricted_load(f, map_location='cpu', extra_globals: Iterable = (), mmap: bool = False):
    """:func:`safe_load`'s path for torch < 2.5: ``torch.load`` with a pickle module whose
    unpickler finds only the allowed globals (:class:`_RestrictedUnpickler`). Works on every
    torch (the suite checks it on the newest too)."""
    module = _restricted_module({_qualified(o): o for o in extra_globals})
    mmap_kw = dict(mmap=True) if mmap else {}
    return torch.load(f, map_location=map_location, pickle_module=module, weights_only=False,
                      **mmap_kw)


# ------------------------------------------------------------------------ transformers
def huggingface_unavailable() -> Optional[str]:
    """Why the Hugging Face classes cannot be used here, or ``None`` when they can: they are
    written against transformers >= 5.10 (``transformers.backbone_utils``), which needs torch
    >= 2.6."""
    from importlib import metadata
    from importlib.util import find_spec
    try:
        version = metadata.version('transformers')
    except metadata.PackageNotFoundError:
        version = None
    if version is None or find_spec('transformers') is None:
        need = ('pip install "cvt_mm[hf]" (transformers >= 5.10, which needs torch >= 2.6)')
        if not has('compiler_is_exporting'):
            need += f'; this is torch {torch.__version__}: no transformers 5 runs on it'
        return f'transformers is not installed: {need}'
    if find_spec('transformers.backbone_utils') is None:
        return (f'transformers {version} is installed; cvt_mm\'s Hugging Face classes need '
                'transformers >= 5.10 (transformers.backbone_utils), which needs torch >= 2.6')
    return None


def require_huggingface() -> None:
    """Raise ``ImportError`` saying why, where :func:`huggingface_unavailable` has a reason."""
    why = huggingface_unavailable()
    if why:
        raise ImportError(f"cvt_mm's Hugging Face classes are not available here: {why}")
