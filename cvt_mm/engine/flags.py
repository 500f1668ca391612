"""The small per-iteration collectives of the hooks (a stop request, a non-finite loss, the
resume choice): the process group they travel on, and a wait that cannot hang on a dead peer.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable

import torch
import torch.distributed as torch_dist

__all__ = ['flag_group', 'timed']

# Default process group -> the gloo group the per-iteration flags travel on beside it (None:
# the default group itself). Weak keys: a group kept alive here after destroy_process_group
# keeps gloo's threads running into interpreter shutdown, which sometimes aborts the process
# ("terminate called without an active exception") after a run that finished.
_flag_groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def flag_group():
    """The process group of the small per-iteration flags (a stop request, a non-finite
    loss): None (the default group) when the default group runs gloo for CPU tensors,
    otherwise a gloo group of all ranks beside it, created once per default group.

    Under NCCL an all-reduce returns as soon as it is queued, so a wait on it with a timeout
    cannot tell a dead peer; on gloo it blocks until every rank has answered and raises when
    a peer's connection is gone. The flags live on the CPU, so no GPU synchronisation is
    added either. Every rank must make the first call at the same point (creating the group
    is a collective): the hooks make it in ``before_train``.

    Returns:
        ProcessGroup | None: the group to pass to the flag collectives.
    """
    default = torch_dist.group.WORLD
    if default is None:  # no process group (a single process)
        return None
    if default not in _flag_groups:
        backend = str(torch_dist.get_backend()).lower()
        _flag_groups[default] = None if 'gloo' in backend else torch_dist.new_group(
            backend='gloo')
    return _flag_groups[default]


def timed(fn: Callable[[], object], timeout: float) -> bool:
    """Run a collective in a helper thread; False when it raised or did not finish within
    ``timeout`` seconds (a peer has died: gloo raises, NCCL would block)."""
    outcome = {}
    # The CUDA device is per thread: the helper must use the caller's (NCCL collectives).
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def target():
        try:
            if device is not None:
                torch.cuda.set_device(device)
            fn()
            outcome['ok'] = True
        except Exception as err:  # noqa: BLE001 - reported by the caller
            outcome['error'] = err

    thread = threading.Thread(target=target, name='cvt_mm-preemption', daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome.get('ok'))
