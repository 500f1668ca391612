"""The backbones, registered in MMEngine's root ``MODELS`` (so every toolbox finds them), and
their checkpoint layouts, registered with :mod:`cvt_mm.checkpoint.formats`."""
from . import cmt_converter, cvt_converter  # noqa: F401  (layout registrations)
from .cmt import CMT
from .cvt import CvT

__all__ = ['CMT', 'CvT']
