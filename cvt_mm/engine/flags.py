"""The process group of the hooks' small collectives (a stop request, a non-finite loss, the
resume choice, the random states of a checkpoint)."""
from __future__ import annotations

import weakref

import torch.distributed as torch_dist

__all__ = ['flag_group']

# Default group -> its gloo side group (None: the default group runs gloo). Weak keys: a group
# kept alive after destroy_process_group keeps gloo's threads running into interpreter
# shutdown, which sometimes aborts a finished run ("terminate called without an active
# exception").
_flag_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def flag_group():
    """The gloo group of the flags: None (the default group) when that runs gloo, else a gloo
    group of all ranks beside it, created once (a collective: every rank makes the first call
    at the same point). On gloo a collective fails when a peer's connection is gone and its
    ``Work.wait(timeout)`` bounds a wait; an NCCL all-reduce returns once queued, so neither
    could tell a dead peer. The flags live on the CPU: no GPU synchronisation is added.

    Returns:
        ProcessGroup | None: the group to pass to the collectives.
    """
    default = torch_dist.group.WORLD
    if default is None:  # no process group (a single process)
        return None
    if default not in _flag_groups:
        gloo = 'gloo' in str(torch_dist.get_backend()).lower()
        _flag_groups[default] = None if gloo else torch_dist.new_group(backend='gloo')
    return _flag_groups[default]
