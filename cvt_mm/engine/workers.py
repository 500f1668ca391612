"""Data-loader workers that die with the process that started them (:func:`guard_data_worker`),
also when it is SIGKILLed, and leave SIGTERM/SIGUSR1 to it (``PreemptionHook``); the process
that configures them ends them at its exit (:func:`kill_guarded_children`), since Python ends
daemonic children with the SIGTERM they ignore. (PyTorch's own watchdog polls the parent every
few seconds, and takes a fork server for it.)

Example::

    val_dataloader = dict(num_workers=2, worker_init_fn=dict(type='guard_data_worker'), ...)
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import os
import select
import signal
import sys
import threading
from typing import Optional, Union

import torch
from mmengine.dataset.utils import worker_init_fn as mmengine_worker_init_fn
from mmengine.dist import get_dist_info
from mmengine.registry import FUNCTIONS

__all__ = ['guard_data_worker', 'guarded_worker_init_cfg', 'guard_dataloader_workers',
           'kill_guarded_children', 'end_workers']

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux); False
    where it cannot."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    return True


def _die_with_process(pid: int) -> bool:
    """SIGKILL this process when process ``pid`` ends, by a thread waiting on its pidfd (Linux
    5.3+): for workers of the fork server, which outlives the training process. False where
    pidfds are not available."""
    if not hasattr(os, 'pidfd_open'):
        return False
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except OSError:
        return False

    def watch():
        select.select([fd], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name='cvt_mm-main-watch', daemon=True).start()
    return True


def _ignores_sigterm(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGTERM (its ``SigIgn`` mask in /proc)."""
    try:
        with open(f'/proc/{pid}/status') as f:
            mask = next(line.split()[1] for line in f if line.startswith('SigIgn:'))
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def kill_guarded_children() -> None:
    """SIGKILL the daemonic children that ignore SIGTERM, at interpreter exit before
    ``multiprocessing``'s handler (atexit is LIFO), which would SIGTERM them and wait forever."""
    stubborn = [c for c in multiprocessing.active_children()
                if c.daemon and _ignores_sigterm(c.pid)]
    if stubborn:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # PyTorch's handler would raise
    for child in stubborn:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)


@FUNCTIONS.register_module()
def guard_data_worker(worker_id: int, seed: Optional[int] = None,
                      num_workers: Optional[int] = None, rank: Optional[int] = None) -> None:
    """``worker_init_fn``: the worker dies with the training process that started it (Linux:
    the kernel for ``fork``/``spawn`` workers, a pidfd for ``forkserver`` ones; elsewhere
    PyTorch's watchdog), and there ignores SIGTERM and SIGUSR1, which schedulers send to every
    process: a worker dying of them would crash the training process before its checkpoint.
    With ``seed``, it is seeded as MMEngine's ``worker_init_fn`` does.

    Args:
        worker_id (int): passed by PyTorch.
        seed (int, optional): the run's seed. Defaults to None (PyTorch's worker seeding).
        num_workers (int, optional): workers per process, for the seeding. Defaults to None
            (read from the worker info).
        rank (int, optional): this process's rank, for the seeding. Defaults to None (read
            from the distributed environment).
    """
    # The process that started the worker: the parent, or under the forkserver start method
    # the fork server's client.
    main = multiprocessing.parent_process()
    if main is None:
        guarded = False
    elif os.getppid() == main.pid:
        guarded = _die_with_parent(main.pid)
    else:
        guarded = _die_with_process(main.pid)
    if guarded:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if seed is not None:
        if num_workers is None:
            num_workers = torch.utils.data.get_worker_info().num_workers
        if rank is None:
            rank = get_dist_info()[0]
        mmengine_worker_init_fn(worker_id, num_workers, rank, seed)


def guarded_worker_init_cfg(seed: Optional[int] = None) -> dict:
    """The ``worker_init_fn`` config of :func:`guard_data_worker`; from now on this process
    ends such workers at its exit (:func:`kill_guarded_children`)."""
    global _exit_kills_guarded_children
    if not _exit_kills_guarded_children:
        _exit_kills_guarded_children = True
        import multiprocessing.util  # noqa: F401  (its exit function is registered first)
        atexit.register(kill_guarded_children)  # atexit is LIFO: before multiprocessing's
    return dict(type='guard_data_worker', seed=seed)

_exit_kills_guarded_children = False


def guard_dataloader_workers(cfg: Union[dict, None]) -> None:
    """Give a dataloader config with workers :func:`guard_data_worker` (in place), unless it
    has a ``worker_init_fn`` of its own."""
    if cfg and cfg.get('num_workers', 0) and 'worker_init_fn' not in cfg:
        cfg['worker_init_fn'] = guarded_worker_init_cfg()


def end_workers(loader) -> None:
    """End a data loader's persistent workers now, through its iterator's own shutdown. Left
    to garbage collection (a preempted run's loader is in reference cycles), its queues may go
    first: the workers never get their stop message, each join times out (5 s) and the SIGTERM
    after it is ignored (:func:`guard_data_worker`), 10 s more per preemption (tests/soak.py)."""
    iterator = getattr(loader, '_iterator', None)
    if hasattr(iterator, '_shutdown_workers'):
        iterator._shutdown_workers()
