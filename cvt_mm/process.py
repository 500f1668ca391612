"""Importing this module sets the process up as cvt_mm's tools do (:func:`cvt_mm.setup_process`:
safe checkpoint reading, atomic checkpoint writes, cached and verified downloads; the list is
:mod:`cvt_mm.integration`'s). It is for the tools that are not ours, such as a toolbox's own
``tools/train.py``, which a config reaches only through its ``custom_imports``::

    custom_imports = dict(imports=['cvt_mm', 'cvt_mm.process'], allow_failed_imports=False)

Without it, MMEngine reads checkpoints with its own ``torch.load``, which on torch < 2.6
unpickles anything (docs/checkpoints.md, "Safe loading"). ``import cvt_mm`` alone changes
none of this: a plugin only registers.
"""
from .integration import setup_process

setup_process()
