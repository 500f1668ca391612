"""The CvT and CMT models and backbones, each family in one file (:mod:`.cvt`, :mod:`.cmt`), and
their registrations, each where the library is installed:

* MMEngine's root ``MODELS`` (``type='CvT'``, ``type='CMT'``), which MMDetection's,
  MMSegmentation's and MMPretrain's registries fall back to;
* timm (``timm.create_model('cvt_13')``, ``'cmt_s'``, ...);
* transformers' ``AutoConfig`` / ``AutoBackbone`` (:mod:`.huggingface`).

The speed machinery sits one step away, in :mod:`.fast`.
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
