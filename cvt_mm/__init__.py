"""cvt_mm: convolutional vision transformers (CvT, CMT) for OpenMMLab.

``import cvt_mm`` (or ``custom_imports=dict(imports=['cvt_mm'])`` in a config) registers the
backbones for MMDetection, MMSegmentation and MMPretrain, makes MMEngine checkpoints
loadable under torch's safe unpickling (see ``cvt_mm.checkpoint_compat``), registers the
training-engine pieces (see ``cvt_mm.engine``: CPU DDP, atomic checkpoints, resume, hooks),
routes ``http(s)://`` checkpoints through a verified download cache (see ``cvt_mm.hub``) and
lets MMPretrain's inferencers be built after MMDetection's or MMSegmentation's in one process
(see ``cvt_mm.scope_compat``).
"""
# isort: off
# The order matters (side effects), so it is not sorted.
from . import checkpoint_compat  # noqa: F401  (side effect: allow MMEngine's own types)
# First: engine.optim imports mmpretrain, which must see the compatibility switch.
from . import toolbox_compat  # noqa: F401  (side effect: mmpretrain beside transformers >= 5)
from . import engine  # noqa: F401  (side effect: register the wrapper, backend and hooks)
from . import models  # noqa: F401  (side effect: register the backbones)
from . import hub  # noqa: F401  (side effect: http(s) checkpoints through our cache)
# After engine (which imports mmpretrain.apis, after toolbox_compat's switch).
from . import scope_compat  # noqa: F401  (side effect: MMPretrain inferencers beside mmdet/mmseg)
# isort: on

__version__ = '0.1.0'
