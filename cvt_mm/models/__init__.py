"""Backbones. Importing this module registers them in MMEngine's root ``MODELS`` registry,
which MMDetection, MMSegmentation and MMPretrain all fall back to (see ``cvt_mm.registry``)."""
from .cmt import CMT  # noqa: F401
from .cvt import CvT  # noqa: F401
