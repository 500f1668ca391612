"""What cvt_mm changes outside itself, and why: the one place.

The modules of :mod:`cvt_mm.models`, :mod:`cvt_mm.engine` and :mod:`cvt_mm.checkpoint` only
define things and register them in MMEngine's registries. Changes outside the package are
made here, each once, in two steps.

``import cvt_mm`` (the configs' ``custom_imports``) calls :func:`apply`, which makes only the
changes without which the registered parts fail on the supported stack:

1. **MMPretrain's model imports**: ``dependency.WITH_MULTIMODAL = False`` when transformers
   >= 5 is installed, before ``mmpretrain.models`` loads. Beside transformers 5 its multimodal
   models fail to import, and with them every classifier and MMPretrain's registry scope
   (``tests/test_integration.py``). Nothing changes with transformers < 5 or without it.
2. **torch's safe unpickler**: MMEngine's ``HistoryBuffer`` and numpy's array and scalar
   types are allow-listed (:func:`cvt_mm.compat.allow_in_safe_load`), so a checkpoint MMEngine
   wrote resumes under torch >= 2.6 without turning safe loading off (``weights_only=False``)
   for every file. Older torch has no allow-list: there our tools' loader (7) reads them.
3. **MMEngine's** ``HistoryBuffer`` pickles without its default statistics methods (re-added
   when unpickled): they pickle as ``getattr``, which safe loading must keep refusing.
4. **MMEngine's config scopes**, on OneDL's forks only: MMEngine finds ``mmseg::`` bases through
   the distribution ``mmsegmentation``, which the fork ships as ``onedl-mmsegmentation``
   (``ModuleNotFoundError: mmsegmentation is not installed``); a scope whose distribution is
   absent but whose module imports is looked up by its module instead. Nothing changes where
   the upstream packages are installed.

Our tools call :func:`setup_process` as well; so can a user who builds a ``Runner`` or an
inferencer in a process of their own and wants the same behaviour, and a config run by a
toolbox's own ``tools/train.py`` gets it with ``custom_imports=dict(imports=['cvt_mm',
'cvt_mm.process'])`` (:mod:`cvt_mm.process`):

5. **MMEngine's local storage backend** writes through a temporary file and a rename
   (:class:`~cvt_mm.engine.fileio.AtomicLocalBackend`): a run killed while saving left a
   truncated checkpoint under the final name, which ``--resume`` then picked.
6. **MMEngine's** ``http(s)://`` **checkpoint loader** becomes
   :func:`~cvt_mm.checkpoint.loading.load_from_http` (cached, verified, safe reading):
   MMEngine's unpickles downloads with ``weights_only=False``.
7. **MMEngine's local checkpoint loader** becomes
   :func:`~cvt_mm.checkpoint.loading.load_from_local` (:func:`cvt_mm.compat.safe_load`):
   MMEngine's ``torch.load`` unpickles anything under torch < 2.6, and OneDL's MMEngine falls
   back to ``weights_only=False`` when safe loading fails.
8. **MMPretrain's inferencers** build their test pipeline in MMPretrain's registry scope, as
   they already build their model: MMDetection's and MMSegmentation's inferencers leave the
   process's one default scope at ``mmdet``/``mmseg``, and an ``ImageClassificationInferencer``
   built afterwards looked its transforms up there (``KeyError: 'ResizeEdge is not in the
   mmdet::transform registry'``, or ``Resize`` of the wrong toolbox). Built alone, or with
   MMPretrain's scope current, they build what they built before (docs/python_api.md).
9. **Python's garbage collector** first collects what is garbage then, and then leaves out the
   objects the process still holds (``gc.collect()``, ``gc.freeze()``; frozen objects are
   never collected, so cyclic garbage left at that moment would stay for good): the imported
   stack, half a million objects that live as long as the process. Every later full
   collection walked them all (0.25 s each on the 2-core machine; MMEngine runs one after
   building each dataset, Python one whenever the tracked objects grow by a quarter), and so
   did those of the data workers forked from the process, which also write to the pages of
   the objects they walk (Python's ``gc.freeze`` documentation). A short training run with
   two data workers took 1.4 to 2.4 CPU s less (docs/benchmarks.md).
   What the process makes afterwards, the runner included, is collected as before.

The guarded data workers' exit handler is registered where they are configured
(:func:`cvt_mm.engine.workers.guarded_worker_init_cfg`); the CPU allocator setting is the
launchers' (tools/misc/cpu_malloc.sh), read by glibc when a process starts.

Example::

    import cvt_mm          # 1-4 (idempotent)
    cvt_mm.setup_process()  # 5-9, as tools/train.py does (idempotent)
"""
from __future__ import annotations

import functools
import gc
import sys
from importlib import metadata

import numpy as np
import torch
from mmengine.registry import DefaultScope

from . import compat
from ._imports import installed

__all__ = ['apply', 'setup_process', 'keep_mmpretrain_importable',
           'allow_mmengine_checkpoints', 'resolve_forked_config_scopes',
           'scope_mmpretrain_inferencers']

_applied = False
_process_set_up = False


# ------------------------------------------------------------------------ MMPretrain
def _major(version: str) -> int:
    head = version.split('.')[0]
    return int(head) if head.isdigit() else 0


def keep_mmpretrain_importable() -> bool:
    """Turn MMPretrain's multimodal imports off if transformers >= 5 would break them.

    Returns:
        bool: whether anything was changed (False without mmpretrain, with transformers < 5,
        or when ``mmpretrain.models`` was imported already).
    """
    try:
        if _major(metadata.version('transformers')) < 5:
            return False
    except metadata.PackageNotFoundError:
        return False
    # By import name: OneDL's fork is the distribution onedl-mmpretrain.
    if not installed('mmpretrain'):
        return False
    if 'mmpretrain.models' in sys.modules:
        return False  # too late: it imported (or failed) already
    from mmpretrain.utils import dependency
    dependency.WITH_MULTIMODAL = False
    return True


_MARK = '_cvt_mm_scoped'


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def scope_mmpretrain_inferencers() -> list:
    """Build the pipeline of every MMPretrain inferencer in the ``mmpretrain`` scope.

    Wraps ``_init_pipeline`` of each subclass of ``mmpretrain.apis.BaseInferencer`` that
    defines one (MMPretrain 1.2: image classification, retrieval, captioning, feature
    extraction, ...) in ``DefaultScope.overwrite_default_scope('mmpretrain')``. Idempotent.
    Methods are looked up when called, so an inferencer whose config imports cvt_mm while it
    is being built already builds its pipeline through the wrapper.

    Returns:
        list[str]: names of the classes wrapped by this call (empty without MMPretrain, or
        when done already).
    """
    try:
        from mmpretrain.apis.base import BaseInferencer
    except ImportError:
        return []
    wrapped = []
    for cls in _subclasses(BaseInferencer):
        original = cls.__dict__.get('_init_pipeline')
        if original is None or getattr(original, _MARK, False):
            continue

        @functools.wraps(original)
        def init_pipeline(self, cfg, _original=original):
            with DefaultScope.overwrite_default_scope('mmpretrain'):
                return _original(self, cfg)

        setattr(init_pipeline, _MARK, True)
        cls._init_pipeline = init_pipeline
        wrapped.append(cls.__name__)
    return wrapped


# ------------------------------------------------------------------------ safe unpickling
def _numpy_globals() -> list:
    """The numpy callables and classes that pickling ndarrays and numpy scalars refers to."""
    # numpy 2 renamed numpy.core to numpy._core; numpy 1.26 has an empty numpy._core whose
    # submodules forward to numpy.core, so the import (not the attribute) finds both.
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 1.26
        from numpy.core import multiarray
    objs = [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles dtypes as instances of per-type classes (Float64DType, ...).
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        objs += [getattr(dtypes, name) for name in dir(dtypes) if name.endswith('DType')]
    return objs


_DEFAULT_STATISTICS = ('min', 'max', 'current', 'mean')


def _history_buffer_state(self) -> dict:
    """``HistoryBuffer.__getstate__`` without MMEngine's default statistics methods, which
    pickle as ``getattr(HistoryBuffer, 'min')`` and so on: safe loading must refuse the
    ``getattr`` global (it reaches any attribute of any allowed class), and ``__setstate__``
    re-registers the defaults anyway, so only custom methods need pickling."""
    state = {k: v for k, v in self.__dict__.items() if k != 'statistics_methods'}
    custom = {k: v for k, v in self._statistics_methods.items() if k not in _DEFAULT_STATISTICS}
    if custom:
        state['statistics_methods'] = custom
    return state


def allow_mmengine_checkpoints() -> None:
    """Allow-list the types MMEngine writes into its own checkpoints (idempotent). Every file
    is still read with weights-only rules; a checkpoint with any other object is refused.
    Checkpoints written by plain MMEngine (without ``import cvt_mm``) hold the ``getattr``
    references and cannot be resumed safely; weights-only use of them is unaffected."""
    from mmengine.logging.history_buffer import HistoryBuffer
    allowed = [HistoryBuffer, *_numpy_globals()]
    if compat.HAS_ADD_SAFE_GLOBALS:  # torch >= 2.4: MMEngine's own torch.load accepts them
        torch.serialization.add_safe_globals(allowed)
    compat.allow_in_safe_load(allowed)  # compat.safe_load, on every torch
    HistoryBuffer.__getstate__ = _history_buffer_state


# ------------------------------------------------------------------------ config scopes
def _distribution_installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def resolve_forked_config_scopes() -> list:
    """Point MMEngine's ``pkg::`` config scopes whose distribution is not installed, but whose
    module is (OneDL's ``onedl-mmsegmentation`` provides ``mmseg``), at the module: MMEngine's
    ``is_installed`` and ``get_installed_path`` then find it by its import spec.

    Returns:
        list[str]: the scopes changed (empty on the upstream stacks).
    """
    from mmengine.config import utils
    changed = []
    for scope, dist in utils.MODULE2PACKAGE.items():
        if dist != scope and installed(scope) and not _distribution_installed(dist):
            utils.MODULE2PACKAGE[scope] = scope
            changed.append(scope)
    return changed


# ------------------------------------------------------------------------ the two steps
def apply() -> None:
    """Make changes 1-4 of the module's table, once; called by ``import cvt_mm``."""
    global _applied
    if _applied:
        return
    _applied = True
    keep_mmpretrain_importable()  # first: nothing of ours may import mmpretrain.models before
    allow_mmengine_checkpoints()
    resolve_forked_config_scopes()


def setup_process() -> None:
    """Make changes 5-9 of the module's table, once: what our tools do to their process
    before they build a ``Runner`` or an inferencer.

    The last of them concerns the whole process: it runs a full garbage collection, then
    ``gc.freeze()``, so that every object alive at that moment (the imported stack, and
    whatever the caller made before) is never examined or collected by the garbage collector
    again; call it before building large short-lived structures, not after. Undo with
    ``gc.unfreeze()``.

    Example:
        >>> import cvt_mm
        >>> cvt_mm.setup_process()
    """
    global _process_set_up
    if _process_set_up:
        return
    _process_set_up = True
    from mmengine.fileio.backends import register_backend
    from mmengine.runner.checkpoint import CheckpointLoader

    from .checkpoint.hub import URL_SCHEMES
    from .checkpoint.loading import load_from_http, load_from_local
    from .engine.fileio import AtomicLocalBackend
    register_backend('local', AtomicLocalBackend, force=True, prefixes='')
    CheckpointLoader.register_scheme(prefixes=URL_SCHEMES, loader=load_from_http, force=True)
    CheckpointLoader.register_scheme(prefixes='', loader=load_from_local, force=True)
    scope_mmpretrain_inferencers()
    gc.collect()  # freeze() keeps what it freezes for good: garbage first
    gc.freeze()
