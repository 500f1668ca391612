"""Local files written whole or not at all, through MMEngine's storage backends.

MMEngine writes checkpoints (and the ``last_checkpoint`` pointer beside them) through its
``LocalBackend``, which opens the final path and writes into it: a run killed while saving
leaves a truncated file under the final name, which ``--resume`` then picks. The backend
registered here writes to a temporary file in the same folder and renames it over the target
(``os.replace``, atomic on POSIX), so a reader sees the previous file or the complete new one.
:func:`cvt_mm.setup_process` (which our tools call) registers it for local paths.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from mmengine.fileio.backends import LocalBackend

from ..checkpoint.io import write_atomically

__all__ = ['AtomicLocalBackend']


class AtomicLocalBackend(LocalBackend):
    """MMEngine's local storage backend with atomic ``put`` and ``put_text``."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        write_atomically(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        write_atomically(obj, filepath, encoding)


