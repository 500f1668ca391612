"""One registration that MMDetection, MMSegmentation and MMPretrain all see.

Every downstream ``MODELS`` registry (``mmdet``, ``mmseg``, ``mmpretrain``) is a child of
MMEngine's root ``MODELS``; when a type is not found in the child, ``Registry.get`` walks up the
parent chain. Registering our backbones once in the root therefore makes ``type='CvT'`` and
``type='CMT'`` resolvable in every scope without three copies of the classes and without
importing the toolboxes here.
"""
from mmengine.registry import MODELS

__all__ = ['MODELS']
