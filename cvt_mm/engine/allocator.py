"""The process's CPU memory allocator: glibc's malloc made to reuse large freed blocks.

PyTorch's CPU tensors come from ``malloc``. glibc serves every request above its mmap
threshold (at most 32 MiB) with a fresh ``mmap`` and hands it back with ``munmap`` when the
tensor dies, so the next tensor of that size page-faults each of its 4 KiB pages again. The
large maps of a CPU forward are above it (a CMT-S stage-1 hidden map at 800x1333 is 68 MB, a
CvT-13 stage-1 batch of 16 at 224 is 51 MB), and each element-wise operator over one allocates
its output afresh: faulting the pages in took about four times as long as the operator's own
arithmetic (docs/benchmarks.md, "CPU allocator"). :func:`reuse_freed_memory` turns glibc's
mmap for large blocks and its trimming off, so freed blocks are reused as they are.

What it costs: freed memory stays with the process, so its resident size stays at its peak
between iterations rather than falling back (the peak itself is what any run needs anyway).
"""
from __future__ import annotations

import ctypes
import os
import platform
from typing import Mapping, Optional

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# Set to 'system' to leave the allocator as the process started with it.
OPT_OUT_ENV = 'CVT_MM_MALLOC'
OPT_OUT_VALUES = ('system', 'reuse')


def _user_choice(environ: Mapping[str, str]) -> Optional[str]:
    """Why the allocator is someone else's choice in this environment, or ``None``."""
    choice = environ.get(OPT_OUT_ENV, 'reuse')
    if choice not in OPT_OUT_VALUES:
        raise ValueError(f'{OPT_OUT_ENV}={choice!r}: allowed values are '
                         f'{", ".join(repr(v) for v in OPT_OUT_VALUES)}')
    if choice == 'system':
        return f'{OPT_OUT_ENV}=system'
    for name in ('MALLOC_MMAP_MAX_', 'MALLOC_MMAP_THRESHOLD_', 'MALLOC_TRIM_THRESHOLD_'):
        if name in environ:
            return f'{name} is set'
    if 'glibc.malloc' in environ.get('GLIBC_TUNABLES', ''):
        return 'GLIBC_TUNABLES sets glibc.malloc'
    preload = environ.get('LD_PRELOAD', '')
    if any(name in preload for name in ('jemalloc', 'tcmalloc', 'mimalloc')):
        return 'LD_PRELOAD names another allocator'
    return None


def reuse_freed_memory(environ: Optional[Mapping[str, str]] = None) -> str:
    """Make this process's glibc ``malloc`` keep and reuse large freed blocks.

    Called by ``tools/train.py``, ``tools/test.py`` and the benchmark's cases before any
    large tensor exists; their worker processes fork from them and inherit it. Left alone
    where the allocator is someone else's choice: ``CVT_MM_MALLOC=system``, any ``MALLOC_*``
    variable of glibc's or ``glibc.malloc`` tunable, or jemalloc/tcmalloc/mimalloc in
    ``LD_PRELOAD``; and where the C library is not glibc (musl, macOS, Windows).

    Args:
        environ (Mapping[str, str], optional): the environment to read the user's choice
            from. Defaults to ``os.environ``.

    Returns:
        str: what was done, one line for the log: starts with ``'reusing freed memory'``
        when the setting was made, ``'left alone'`` otherwise.

    Raises:
        ValueError: ``CVT_MM_MALLOC`` is set to something other than ``'system'`` or
            ``'reuse'``.

    Example::

        >>> from cvt_mm.engine.allocator import reuse_freed_memory
        >>> reuse_freed_memory({'CVT_MM_MALLOC': 'system'})
        'left alone: CVT_MM_MALLOC=system'
    """
    reason = _user_choice(os.environ if environ is None else environ)
    if reason:
        return f'left alone: {reason}'
    if platform.libc_ver()[0] != 'glibc':
        return 'left alone: the C library is not glibc'
    libc = ctypes.CDLL(None)  # the process's own symbols: glibc's, without a library search
    # mallopt returns 1 on success. -1 as the trim threshold is SIZE_MAX: never trim.
    if libc.mallopt(M_MMAP_MAX, 0) != 1 or libc.mallopt(M_TRIM_THRESHOLD, -1) != 1:
        return 'left alone: glibc refused mallopt'
    return ('reusing freed memory: glibc malloc without mmap for large blocks and without '
            f'trimming ({OPT_OUT_ENV}=system opts out)')
