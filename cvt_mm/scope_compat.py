"""Let MMPretrain's inferencers be built after MMDetection's or MMSegmentation's.

MMEngine resolves a registry name (``'ResizeEdge'``, ``'Resize'``) in the *default scope*, one
global for the whole process. ``DetInferencer`` and ``MMSegInferencer`` call
``init_default_scope('mmdet' / 'mmseg')`` when they are built and leave that scope set.
MMPretrain's inferencers build their model inside ``DefaultScope.overwrite_default_scope(
'mmpretrain')`` but their test pipeline in whatever scope is current, so an
``ImageClassificationInferencer`` built after either of the others looks its transforms up in
MMDetection's or MMSegmentation's registry: ``KeyError: 'ResizeEdge is not in the
mmdet::transform registry'``, or, worse, a transform of the same name from the wrong toolbox
(``Resize`` exists in all three, with different arguments).

On ``import cvt_mm`` (which our configs' ``custom_imports`` does whenever one is read) each
MMPretrain inferencer builds its pipeline in MMPretrain's scope, as it already builds its
model; the process's default scope is left as it was. Nothing else changes: called alone, or
with MMPretrain's scope current, the inferencers build exactly what they built before.
What is built stays bound to its toolbox, so inferencers of the three toolboxes can then be
built and called in any order (``tests/test_python_api.py``).

Example::

    from mmseg.apis import MMSegInferencer
    from mmpretrain import ImageClassificationInferencer
    segmentor = MMSegInferencer(model='configs/upernet_cvt13_ade20k.py', weights=...)
    classifier = ImageClassificationInferencer(         # fails without cvt_mm imported
        model='configs/imagenet_cvt13_300e_in1k.py', pretrained=...)
"""
from __future__ import annotations

import functools

from mmengine.registry import DefaultScope

__all__ = ['scope_mmpretrain_inferencers']

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


scope_mmpretrain_inferencers()
