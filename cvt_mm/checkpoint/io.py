"""The bottom layer of checkpoint I/O: reading weight files safely, and writing files whole
or not at all. It knows nothing of URLs, formats or published weights (the layers above).

* :func:`read_local`: ``torch.load(weights_only=True)`` (:func:`cvt_mm.compat.safe_load`) or
  safetensors; a file that is not a
  readable weight file raises :class:`CheckpointError` saying what it is instead.
* :func:`write_atomically`: through a temporary file in the same folder and a rename, so a
  reader sees the previous file or the complete new one; temporary files that killed
  writers left behind are removed by the next write into the folder.

Example::

    >>> import io, torch
    >>> buffer = io.BytesIO()
    >>> torch.save({'w': torch.ones(2)}, buffer)
    >>> write_atomically(buffer.getvalue(), 'checkpoints/w.pth')
    >>> read_local('checkpoints/w.pth')['w']
    tensor([1., 1.])
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import pickle
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Optional, Union

from ..compat import safe_load

__all__ = ['CheckpointError', 'sniff_file', 'read_local', 'write_atomically', 'remove_stale_parts']


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read, or cannot be used for the model it was given to."""


_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default (zip) format
_PICKLE_PROTOCOL_BYTE = 0x80  # torch.save's legacy format: a pickle stream


def sniff_file(path: str) -> str:
    """What a file holds, from its first kilobyte (nothing is unpickled).

    Args:
        path (str): the file.

    Returns:
        str: ``'empty'``, ``'html'`` (an error or login page saved instead of the weights),
        ``'zip'`` (``torch.save``'s format), ``'pickle'`` (its legacy format),
        ``'safetensors'`` or ``'unknown'``.

    Example::

        >>> import torch
        >>> torch.save({'w': torch.zeros(2)}, 'w.pth')
        >>> sniff_file('w.pth')
        'zip'
    """
    with open(path, 'rb') as f:
        head = f.read(1024)
    if not head:
        return 'empty'
    text = head.lstrip()[:256].lower()
    if text.startswith((b'<!doctype html', b'<html', b'<head', b'<?xml')) or b'<html' in text:
        return 'html'
    if head.startswith(_ZIP_MAGIC):
        return 'zip'
    if head[0] == _PICKLE_PROTOCOL_BYTE and len(head) > 1 and 2 <= head[1] <= 5:
        return 'pickle'
    # safetensors: an 8-byte little-endian header length, then the JSON header.
    if len(head) > 8 and head[8:9] == b'{' and int.from_bytes(head[:8], 'little') < 100 << 20:
        return 'safetensors'
    return 'unknown'


def _not_a_file_error(path: str, hint: str) -> CheckpointError:
    if re.match(r'^[a-z][a-z0-9+.-]*://', path, re.I):  # http(s):// never gets here
        return CheckpointError(
            f'checkpoint {path} is a URL; download the file first and point to it by path '
            '(only http:// and https:// URLs are downloaded, into the torch hub cache)'
            f'{hint}')
    if os.path.isdir(path):
        inside = sorted(f for f in os.listdir(path)
                        if f.endswith(('.pth', '.pt', '.bin', '.ckpt', '.safetensors')))
        found = f' (weight files inside: {", ".join(inside[:8])})' if inside else \
            ' (no .pth/.pt/.bin/.ckpt/.safetensors file inside)'
        return CheckpointError(f'checkpoint {path} is a directory, not a file{found}; '
                               'point to the weight file itself')
    return CheckpointError(f'checkpoint file not found: {path}{hint}')


def _unreadable_error(path: str, kind: str, err: Optional[Exception],
                      hint: str) -> CheckpointError:
    """The reason a file could not be read, in the user's terms; never advice to turn safe
    loading off (torch's own message suggests ``weights_only=False``)."""
    size = os.path.getsize(path)
    hint = hint or '\nDownload it again from where it is published.'
    if kind == 'empty':
        return CheckpointError(f'checkpoint {path} is empty (0 bytes): an interrupted download '
                               f'or copy left it; download it again.{hint}')
    if kind == 'html':
        return CheckpointError(
            f'checkpoint {path} is an HTML page ({size} bytes), not a weight file: a download '
            'from a sharing link (OneDrive, Google Drive, a release page) saved the web page '
            'instead of the file. Open the link in a browser and use its download button, or '
            f'a direct download link.{hint}')
    if kind == 'unknown':
        return CheckpointError(
            f'checkpoint {path} ({size} bytes) is not a weight file: it is neither a torch.save '
            'zip archive, nor a pickle, nor a safetensors file. Check that the download '
            f'completed and that this is the file you meant.{hint}')
    message = str(err)
    if isinstance(err, pickle.UnpicklingError) or 'weights_only' in message:
        found = re.search(r'GLOBAL ([\w.]+)', message)
        what = f' ({found.group(1)})' if found else ''
        return CheckpointError(
            f'checkpoint {path} holds pickled Python objects{what} besides tensors, which safe '
            'loading refuses: unpickling them could run arbitrary code. Use a weights-only '
            'file (a state dict of tensors) from a source you trust, or a .safetensors file.')
    if kind == 'zip' and ('central directory' in message or 'zip archive' in message):
        return CheckpointError(f'checkpoint {path} ({size} bytes) is a truncated or damaged '
                               f'torch zip archive: download it again.{hint}')
    if isinstance(err, EOFError) or 'truncated' in message.lower():
        return CheckpointError(f'checkpoint {path} ({size} bytes) ends too early ({kind} file '
                               f'cut short): download it again.{hint}')
    return CheckpointError(f'cannot read checkpoint {path} ({kind} file, {size} bytes): '
                           f'{type(err).__name__}: {message}')


def read_local(path: str, hint: str = '', mmap: bool = True) -> dict:
    """Read a local ``.pth``/``.pt``/``.bin``/``.ckpt`` file (safe unpickling) or a
    ``.safetensors`` file.

    A path that is not a readable weight file (missing, a URL, a directory, empty, an HTML
    page, truncated, carrying pickled objects) raises :class:`CheckpointError` saying which of
    these it is and what to do; ``hint`` (where such a file is published) is appended.

    ``torch.save`` zip files are memory-mapped unless ``mmap=False``: tensors are read from the
    file when first used, so reading a checkpoint for its ``meta`` costs little.

    Args:
        path (str): the file.
        hint (str): text added to the errors. Defaults to ``''``.
        mmap (bool): memory-map a zip file. Defaults to True.

    Returns:
        dict: what the file holds (for a ``.safetensors`` file, its tensors by key).

    Raises:
        CheckpointError: the file is missing or no readable weight file, naming why.

    Example::

        >>> import torch
        >>> torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': {'epoch': 12}}, 'e.pth')
        >>> read_local('e.pth')['meta']
        {'epoch': 12}
        >>> read_local('missing.pth', hint='Run the download tool first.')
        Traceback (most recent call last):
        ...
        cvt_mm.checkpoint.io.CheckpointError: ...Run the download tool first.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(f'checkpoint must be a file path, got {type(path).__name__}')
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise _not_a_file_error(path, hint)
    kind = sniff_file(path)
    if kind in ('empty', 'html', 'unknown'):
        raise _unreadable_error(path, kind, None, hint)
    try:
        if kind == 'safetensors' or path.endswith('.safetensors'):
            from safetensors.torch import load_file
            return dict(load_file(path, device='cpu'))
        # DeiT/timm-style training scripts (CMT's among them) store their argparse Namespace
        # beside the weights: a plain attribute bag, safe to rebuild.
        return safe_load(path, extra_globals=[argparse.Namespace], mmap=mmap and kind == 'zip')
    except Exception as err:  # noqa: BLE001 - re-raised with the path, the cause kept
        raise _unreadable_error(path, kind, err, hint) from err


# Temporary files of write_atomically: .<name>.<random>.<pid>@<host>.part
_PART_WRITER = re.compile(r'\.(\d+)@([^@/]*)\.part$')
#: Seconds after which a temporary file whose writer cannot be checked (another host, or a
#: name without a writer) counts as abandoned.
STALE_PART_AGE = 24 * 3600


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_parts(folder: str) -> list:
    """Remove the temporary files that :func:`write_atomically` calls killed mid-write left in
    ``folder``: those of a process of this host that has ended, and those older than
    :data:`STALE_PART_AGE` whose writer cannot be checked (another host's, or of versions that
    did not name the writer). Files being written by a live process stay.

    Args:
        folder (str): the folder.

    Returns:
        list[str]: the files removed.
    """
    host, removed = socket.gethostname(), []
    try:
        names = [n for n in os.listdir(folder) if n.startswith('.') and n.endswith('.part')]
    except OSError:
        return removed
    for name in names:
        path = osp.join(folder, name)
        writer = _PART_WRITER.search(name)
        try:
            if writer and writer.group(2) == host:
                stale = not _pid_alive(int(writer.group(1)))
            else:
                stale = time.time() - os.stat(path).st_mtime > STALE_PART_AGE
            if stale:
                os.remove(path)
                removed.append(path)
        except FileNotFoundError:  # renamed into place or removed meanwhile
            continue
    return removed


def write_atomically(data: Union[bytes, str], filepath: Union[str, Path],
                     encoding: str = 'utf-8') -> None:
    """Write a file completely or not at all: through a temporary file in the same folder and
    a rename, so a reader (or a resumed run) never sees half of it. The folder is created if
    needed. The temporary file's name holds the writer's pid and host, so that the next write
    into the folder removes those of killed writers (:func:`remove_stale_parts`).

    Args:
        data (bytes | str): the content.
        filepath (str | Path): where it goes; replaced if it exists.
        encoding (str): how a ``str`` is encoded. Default ``'utf-8'``.

    Example::

        >>> write_atomically('{"epoch": 3}', 'run/last.json')
        >>> open('run/last.json').read()
        '{"epoch": 3}'
    """
    filepath = os.fspath(filepath)
    folder = osp.dirname(osp.abspath(filepath))
    os.makedirs(folder, exist_ok=True)
    remove_stale_parts(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{osp.basename(filepath)}.',
                               suffix=f'.{os.getpid()}@{socket.gethostname()}.part')
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
