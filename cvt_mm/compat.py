"""What the installed torch (2.1 to the newest) and transformers can do, asked here once, by
feature rather than by version string; the rest of the package asks this module.

=============================  =======  ==========================================================
feature                        torch    used by
=============================  =======  ==========================================================
``torch.load`` allow-list      2.5      :func:`safe_load` (before it: torch's rules, restated)
selective recomputation        2.4      ``selective_cp=True`` (before it: a clear error)
``torch.Generator`` pickles    2.4      nothing any more (the loops no longer copy one)
``get_autocast_dtype(device)`` 2.4      :func:`autocast_state`
``torch.compiler.is_compiling`` 2.3     :func:`is_compiling` (before it: ``torch._dynamo``'s)
SDPA traced at symbolic sizes  2.2      compiled attention (before it: the formula, when compiling)
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
import os
import pickle
import zipfile
from typing import Iterable, Optional

import torch
import torch.utils.checkpoint as _cp

__all__ = ['FEATURES', 'has', 'require', 'aten_ops', 'is_compiling', 'is_exporting',
           'autocast_state', 'allow_in_safe_load', 'safe_load', 'UnsafeCheckpointError',
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


def _sdpa_traces_symbolic_sizes() -> bool:
    # torch 2.2 gave the fused CPU attention an op of its own, whose meta kernel (what dynamo
    # traces with) takes symbolic sizes; torch 2.1's (_scaled_dot_product_flash_attention's)
    # fails on them: "SymIntArrayRef expected to contain only concrete integers".
    try:
        getattr(torch.ops.aten, '_scaled_dot_product_flash_attention_for_cpu')
    except (AttributeError, RuntimeError):
        return False
    return True


# Each feature once, as a constant the functions below read (the Hub folder's code copies the
# functions it needs with their constants: cvt_mm.models.remote_code).
HAS_SAFE_GLOBALS = hasattr(torch.serialization, 'safe_globals')
HAS_ADD_SAFE_GLOBALS = hasattr(torch.serialization, 'add_safe_globals')
HAS_SELECTIVE_CHECKPOINT = hasattr(_cp, 'create_selective_checkpoint_contexts')
HAS_AUTOCAST_DEVICE_API = hasattr(torch, 'get_autocast_dtype')
HAS_COMPILER_IS_COMPILING = hasattr(torch.compiler, 'is_compiling')
HAS_COMPILER_IS_EXPORTING = hasattr(torch.compiler, 'is_exporting')
HAS_ONNX_DYNAMO_EXPORT = _onnx_dynamo()
HAS_SYMBOLIC_SDPA = _sdpa_traces_symbolic_sizes()
GENERATOR_PICKLES = _generator_pickles()

#: feature -> (whether this torch has it, the torch release that brought it)
FEATURES = {
    'safe_globals': (HAS_SAFE_GLOBALS, '2.5'),
    'selective_checkpoint': (HAS_SELECTIVE_CHECKPOINT, '2.4'),
    'generator_pickles': (GENERATOR_PICKLES, '2.4'),
    'autocast_device_api': (HAS_AUTOCAST_DEVICE_API, '2.4'),
    'compiler_is_compiling': (HAS_COMPILER_IS_COMPILING, '2.3'),
    'symbolic_sdpa': (HAS_SYMBOLIC_SDPA, '2.2'),
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
    """Allow ``objs`` (classes, functions) in every later :func:`safe_load`, on every torch.

    Example::

        >>> allow_in_safe_load([argparse.Namespace])
    """
    _extra_globals.update({_qualified(o): o for o in objs})


# What torch's own allow-list gained after 2.1 (checked against 2.13's), for the files newer
# torch writes and reads safely: numpy scalars' bytes (protocol 2), sets, Counters (MMDetection's
# dataset state), devices; dtypes and legacy typed storages are added by name below.
_LATER_ALLOWED = {'_codecs.encode': _codecs.encode, 'builtins.bytearray': bytearray,
                  'builtins.complex': complex, 'builtins.set': set,
                  'collections.Counter': collections.Counter, 'torch.device': torch.device}


@functools.lru_cache(maxsize=1)
def _torch_allowed_globals() -> dict:
    """torch's own ``weights_only`` allow-list with what later releases added, built once."""
    from torch._weights_only_unpickler import _get_allowed_globals
    allowed = dict(_get_allowed_globals())
    allowed.update(_LATER_ALLOWED)
    for name in dir(torch):
        obj = getattr(torch, name, None)
        if isinstance(obj, torch.dtype) or (name.endswith('Storage') and isinstance(obj, type)):
            allowed.setdefault(f'torch.{name}', obj)
    return allowed


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A file that :func:`safe_load` refuses because reading it would run code."""


def _torchscript_entries(f) -> list:
    """The ``constants.pkl`` entries of ``f`` if it is a zip file (a TorchScript archive's
    mark, as ``torch.load`` tells one: it then calls ``torch.jit.load``)."""
    if isinstance(f, (str, os.PathLike)):
        if not zipfile.is_zipfile(f):
            return []
        with zipfile.ZipFile(f) as archive:
            names = archive.namelist()
    elif hasattr(f, 'seek') and hasattr(f, 'tell'):
        position = f.tell()
        try:
            if not zipfile.is_zipfile(f):
                return []
            f.seek(position)
            names = zipfile.ZipFile(f).namelist()
        finally:
            f.seek(position)
    else:
        return []
    return [n for n in names if n.rsplit('/', 1)[-1] == 'constants.pkl']


def safe_load(f, map_location='cpu', extra_globals: Iterable = (), mmap: bool = False):
    """``torch.load`` that runs no code from the file, on every supported torch.

    Refused, with an :class:`UnsafeCheckpointError` or ``pickle.UnpicklingError`` naming what:
    a TorchScript archive (``torch.load`` would hand it to ``torch.jit.load``, which runs its
    code: load one you trust with ``torch.jit.load``); any global not on torch's
    ``weights_only`` allow-list, :func:`allow_in_safe_load`'s or ``extra_globals``; calling
    (REDUCE) or instantiating (NEWOBJ) anything else; setting state (BUILD) on anything but a
    tensor, an ``OrderedDict`` or an instance of an allowed class (an allowed class itself
    stays as it is). On torch >= 2.5 this is torch's own ``weights_only=True`` with the extra
    globals allowed; before, torch's unpickler takes no allow-list and the same rules run in
    :mod:`cvt_mm._weights_only`. Never ``weights_only=False`` with Python's own unpickler.

    Args:
        f (str | os.PathLike | file): what ``torch.load`` takes.
        map_location: as ``torch.load``. Defaults to ``'cpu'``.
        extra_globals (Iterable): classes and functions allowed for this call besides torch's
            and :func:`allow_in_safe_load`'s.
        mmap (bool): memory-map a zip file (``torch.load(mmap=True)``). Defaults to False.

    Returns:
        The unpickled object, e.g. an MMEngine checkpoint's dict.

    Example::

        >>> safe_load('work_dirs/run/epoch_1.pth', extra_globals=[argparse.Namespace])['meta']
    """
    scripted = _torchscript_entries(f)
    if scripted:
        raise UnsafeCheckpointError(
            f'{f!r} is a TorchScript archive (it has {scripted[0]}): loading it runs the code it '
            'carries, and safe loading reads weights only. Load a TorchScript file you trust '
            'with torch.jit.load(path).')
    extra = {**_extra_globals, **{_qualified(o): o for o in extra_globals}}
    mmap_kw = dict(mmap=True) if mmap else {}
    if HAS_SAFE_GLOBALS:
        # torch's safe_globals removes on exit what it added, even what was on the process's
        # list before (import cvt_mm's MMEngine types): give it only what is missing.
        present = set(torch.serialization.get_safe_globals())
        with torch.serialization.safe_globals([o for o in extra.values() if o not in present]):
            return torch.load(f, map_location=map_location, weights_only=True, **mmap_kw)
    from ._weights_only import pickle_module
    module = pickle_module({**_torch_allowed_globals(), **extra})
    return torch.load(f, map_location=map_location, pickle_module=module, weights_only=False,
                      **mmap_kw)


# ------------------------------------------------------------------------ transformers
def huggingface_unavailable() -> Optional[str]:
    """Why the Hugging Face classes cannot be used here, or ``None`` when they can: they are
    written against transformers >= 5.23 (``transformers.backbone_utils``), which needs torch
    >= 2.6."""
    from importlib import metadata
    from importlib.util import find_spec
    try:
        version = metadata.version('transformers')
    except metadata.PackageNotFoundError:
        version = None
    if version is None or find_spec('transformers') is None:
        need = ('pip install "cvt_mm[hf]" (transformers >= 5.23, which needs torch >= 2.6)')
        if not has('compiler_is_exporting'):
            need += f'; this is torch {torch.__version__}: no transformers 5 runs on it'
        return f'transformers is not installed: {need}'
    if find_spec('transformers.backbone_utils') is None:
        return (f'transformers {version} is installed; cvt_mm\'s Hugging Face classes need '
                'transformers >= 5.23 (transformers.backbone_utils), which needs torch >= 2.6')
    return None


def require_huggingface() -> None:
    """Raise ``ImportError`` saying why, where :func:`huggingface_unavailable` has a reason."""
    why = huggingface_unavailable()
    if why:
        raise ImportError(f"cvt_mm's Hugging Face classes are not available here: {why}")
