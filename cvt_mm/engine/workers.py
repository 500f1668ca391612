"""Data-loader workers that die with the process that started them.

:func:`guard_data_worker` (a ``worker_init_fn``) makes each worker die with the process that
started it (Linux ``PR_SET_PDEATHSIG``, or a pidfd under the ``forkserver`` start method), so a
rank killed by SIGKILL leaves no orphaned workers holding memory, and leaves SIGTERM/SIGUSR1 to
the main process (see :class:`cvt_mm.engine.hooks.PreemptionHook`), which stops the workers
itself. The process that configures them (:func:`guarded_worker_init_cfg`) runs
:func:`kill_guarded_children` at interpreter exit, since Python ends daemonic children with the
SIGTERM such workers ignore.

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
           'kill_guarded_children']

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); False where
    that is not available."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    return True


def _die_with_process(pid: int) -> bool:
    """SIGKILL this process when process ``pid``, not its parent, ends: a watcher thread
    waits on a pidfd of it (Linux 5.3+). For workers started through the fork server, whose
    parent is the server; the server outlives the training process (every worker holds it
    open). False where pidfds are not available."""
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
    """At interpreter exit ``multiprocessing`` ends daemonic children with SIGTERM and then
    waits for them; guarded data workers ignore SIGTERM, so the exit would wait forever.
    This runs first (registered later, atexit is LIFO) and SIGKILLs the daemonic children
    that ignore SIGTERM; the others are left to ``multiprocessing``."""
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
    """``worker_init_fn`` for data-loader workers of long runs.

    * The worker is killed when the training process that started it dies, also by
      SIGKILL, so it cannot linger as an orphan holding memory (Linux: by the kernel for
      ``fork`` and ``spawn`` workers, by a watcher thread on a pidfd for ``forkserver``
      workers, whose parent is the fork server; elsewhere the worker relies on PyTorch's
      own watchdog).
    * Where that protection holds, SIGTERM and SIGUSR1 are ignored in the worker: schedulers
      send them to every process, and a worker that died of them would crash the training
      process before it could save a checkpoint (:class:`~cvt_mm.engine.hooks.PreemptionHook`).
    * With ``seed`` given, the worker's generators are seeded as MMEngine's default
      ``worker_init_fn`` does (``num_workers * rank + worker_id + seed``).

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
    """The ``worker_init_fn`` config of :func:`guard_data_worker`. The process that asks
    for it is the one whose exit would wait for such workers: from then on it ends them at
    exit (:func:`kill_guarded_children`)."""
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
