"""Local files written whole or not at all.

MMEngine writes checkpoints (and the ``last_checkpoint`` pointer beside them) through its
``LocalBackend``, which opens the final path and writes into it: a run killed while saving
leaves a truncated file under the final name, which ``--resume`` then picks. The backend
registered here writes to a temporary file in the same folder and renames it over the target
(``os.replace``, atomic on POSIX), so a reader sees the previous file or the complete new one.
"""
from __future__ import annotations

import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Union

from mmengine.fileio.backends import LocalBackend, register_backend

__all__ = ['AtomicLocalBackend', 'write_atomically']


def write_atomically(data: Union[bytes, str], filepath: Union[str, Path],
                     encoding: str = 'utf-8') -> None:
    """Write ``data`` to ``filepath`` through a temporary file in the same folder and a rename;
    the folder is created if needed."""
    filepath = os.fspath(filepath)
    folder = osp.dirname(osp.abspath(filepath))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{osp.basename(filepath)}.', suffix='.part')
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, filepath)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise


class AtomicLocalBackend(LocalBackend):
    """MMEngine's local storage backend with atomic ``put`` and ``put_text``."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        write_atomically(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        write_atomically(obj, filepath, encoding)


register_backend('local', AtomicLocalBackend, force=True, prefixes='')
