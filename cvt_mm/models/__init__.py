"""The CvT and CMT models and backbones, each family in one file (:mod:`.cvt`, :mod:`.cmt`), and
their registrations, each where the library is installed:

* MMEngine's root ``MODELS`` (``type='CvT'``, ``type='CMT'``), which MMDetection's,
  MMSegmentation's and MMPretrain's registries fall back to;
* timm (``timm.create_model('cvt_13')``, ``'cmt_s'``, ...);
* transformers' ``AutoConfig`` / ``AutoBackbone`` (:mod:`.huggingface`).

The speed machinery sits one step away, in :mod:`.fast`.

Example: the same CvT-13 as timm's model (logits) and as OpenMMLab's backbone (a pyramid)::

    >>> import torch
    >>> from cvt_mm.models import CvT, CvTModel
    >>> CvTModel('13', num_classes=10).eval()(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 10])
    >>> [tuple(f.shape) for f in CvT(arch='13').eval()(torch.randn(1, 3, 224, 224))]
    [(1, 64, 56, 56), (1, 192, 28, 28), (1, 384, 14, 14)]
"""
from .._imports import installed
from ..compat import huggingface_unavailable
from .cmt import CMT, CMTModel
from .cvt import CvT, CvTModel

# transformers 4 (or 5 on a torch it does not support) is left alone: asking for the classes
# (``import cvt_mm.models.huggingface``) says why they are absent.
if installed('transformers') and huggingface_unavailable() is None:
    from . import huggingface  # noqa: F401  (registers the Hugging Face backbones)

__all__ = ['CMT', 'CMTModel', 'CvT', 'CvTModel']
