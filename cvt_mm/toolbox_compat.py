"""Keep MMPretrain 1.2.0 importable beside transformers >= 5.

MMPretrain imports its multimodal models (BLIP, CLIP, Flamingo, ...) together with every other
model whenever ``transformers >= 4.28`` and ``pycocotools`` are installed. Those modules subclass
transformers classes that transformers 5 no longer provides, so ``import mmpretrain.models``
fails (``TypeError: NoneType takes no arguments``), and with it every classification config and
MMPretrain's registry scope. GPU images commonly ship transformers 5 (the GPU node this project
is checked on has 5.17). Our configs use none of the multimodal models: beside transformers >= 5
we register them as the placeholders MMPretrain itself uses when transformers is absent, which
say what to install if one of them is built. With transformers 4, nothing changes.

Example::

    import cvt_mm  # before mmpretrain.models is imported (configs: custom_imports)
"""
from __future__ import annotations

import sys
from importlib import metadata

__all__ = ['keep_mmpretrain_importable']


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
        metadata.version('mmpretrain')
    except metadata.PackageNotFoundError:
        return False
    if 'mmpretrain.models' in sys.modules:
        return False  # too late: it imported (or failed) already
    from mmpretrain.utils import dependency
    dependency.WITH_MULTIMODAL = False
    return True


keep_mmpretrain_importable()
