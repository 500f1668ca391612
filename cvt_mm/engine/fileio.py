"""MMEngine's local storage backend writing whole files or none (:class:`AtomicLocalBackend`):
its own opens the final path and writes into it, so a run killed while saving left a
truncated checkpoint under the final name. :func:`cvt_mm.setup_process` registers it."""
from __future__ import annotations

from pathlib import Path
from typing import Union

from mmengine.fileio.backends import LocalBackend

from ..checkpoint.io import write_atomically

__all__ = ['AtomicLocalBackend']


class AtomicLocalBackend(LocalBackend):
    """``LocalBackend`` whose ``put`` and ``put_text`` write a temporary file and rename it."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        write_atomically(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        write_atomically(obj, filepath, encoding)
