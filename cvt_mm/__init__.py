"""cvt_mm: convolutional vision transformers (CvT, CMT) for OpenMMLab, timm and Hugging Face.

``import cvt_mm`` (or ``custom_imports=dict(imports=['cvt_mm'])`` in a config) registers the
models where their users look for them, each only where that library is installed
(:mod:`cvt_mm.models`): MMEngine's registries for MMDetection, MMSegmentation and MMPretrain
(``type='CvT'``, ``type='CMT'``), timm (``timm.create_model('cvt_13')``) and transformers
(``AutoBackbone``). The models need only PyTorch.

Where MMEngine is installed it also

1. makes the few changes to torch, MMEngine and MMPretrain without which the registered parts
   fail on the supported stack (:func:`cvt_mm.integration.apply`, each with its reason);
2. registers the training pieces (:mod:`cvt_mm.engine`: exact resume, preemption, CPU DDP,
   hooks, layer-wise LR decay).

Nothing else. Our tools also call :func:`setup_process` (atomic checkpoint writes, cached and
verified downloads, MMPretrain's inferencers in their own scope; :mod:`cvt_mm.integration`);
call it too when you build a ``Runner`` yourself and want the same. Checkpoint I/O (reading,
downloading, published weights, layouts, loading) is :mod:`cvt_mm.checkpoint`; what the tools
call on a config's whole model (building, FLOPs, ONNX export) is :mod:`cvt_mm.apis`.

Example: the backbones by name, as a config names them::

    >>> import torch, cvt_mm
    >>> from mmengine.registry import MODELS
    >>> backbone = MODELS.build(dict(type='CMT', arch='ti', out_indices=(1, 2, 3)))
    >>> [tuple(f.shape) for f in backbone(torch.randn(1, 3, 160, 160))]
    [(1, 92, 20, 20), (1, 184, 10, 10), (1, 368, 5, 5)]
"""
from ._imports import installed as _installed

__version__ = '0.1.0'

if _installed('mmengine'):
    from . import integration
    from .integration import setup_process

    integration.apply()  # first: MMPretrain's switch must precede any import of its models
    from . import engine  # noqa: E402,F401  (registrations)

    __all__ = ['setup_process']

from . import models  # noqa: E402,F401  (registrations)
