"""Capturing and restoring every random generator a training process draws from (Python,
NumPy, torch, CUDA). :class:`~cvt_mm.engine.hooks.ExactResumeHook` saves them per rank in
each checkpoint and restores them on resume.
"""
from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ['capture_random_states', 'restore_random_states']


def capture_random_states() -> dict:
    """Python, NumPy, torch CPU and (when initialised) the current CUDA device's generator
    states, in types that safe checkpoint loading accepts (ints, tuples, tensors)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    states = dict(python=random.getstate(),
                  numpy=(np_kind, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos),
                         int(np_has_gauss), float(np_gauss)),
                  torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state()
    return states


def restore_random_states(states: dict) -> None:
    """Set the generators to states from :func:`capture_random_states` (tensors may come
    back on a GPU from ``map_location``; they are moved to the CPU)."""
    version, internal, gauss = states['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states['numpy']
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states['torch'].cpu())
    if states.get('cuda') is not None and torch.cuda.is_available():
        cuda = states['cuda']
        torch.cuda.set_rng_state(cuda[0] if isinstance(cuda, (list, tuple)) else cuda.cpu())
