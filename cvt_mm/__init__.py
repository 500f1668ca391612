"""cvt_mm: convolutional vision transformers (CvT, CMT) for OpenMMLab.

``import cvt_mm`` (or ``custom_imports=dict(imports=['cvt_mm'])`` in a config):

1. makes the changes to torch, MMEngine and MMPretrain that :mod:`cvt_mm.integration` lists,
   with the reason for each, in one place;
2. registers the backbones (:mod:`cvt_mm.models`: ``type='CvT'``, ``type='CMT'``) for
   MMDetection, MMSegmentation and MMPretrain, with their checkpoint layouts;
3. registers the training pieces (:mod:`cvt_mm.engine`: exact resume, preemption, CPU DDP,
   hooks, layer-wise LR decay).

Checkpoint I/O (reading, downloading, published weights, layouts, loading) is
:mod:`cvt_mm.checkpoint`.
"""
from . import integration

integration.apply()  # first: MMPretrain's switch must precede any import of mmpretrain.models

from . import engine, models  # noqa: E402,F401  (registrations)

__version__ = '0.1.0'
