"""Checkpoints from where they are published: download once, verify, cache, read safely.

A checkpoint may be named by an ``http://`` or ``https://`` URL wherever a path is accepted:
``init_cfg=dict(type='Pretrained', checkpoint=URL)`` in our backbones, ``load_from = URL`` in a
config, ``tools/test.py CONFIG URL``. The file is downloaded once into the torch hub cache,
``torch.hub.get_dir()/checkpoints/`` (``$TORCH_HOME/hub/checkpoints``, where torch and MMEngine
keep theirs), with a progress bar on a terminal, checked against the SHA-256 its caller
expects (:func:`cvt_mm.checkpoint.read_checkpoint` passes the one
:data:`~cvt_mm.checkpoint.published.PUBLISHED` lists), and then read safely by the caller.
This layer knows URLs and bytes, not formats or published files.

Downloads are atomic: the bytes go to ``<name>.<pid>.<random>.part`` in the cache folder, are
flushed to disk, checked (length against ``Content-Length``, SHA-256, not an HTML page) and only
then renamed to ``<name>``. An interrupted or wrong download raises :class:`DownloadError` naming
the URL, what was expected and what arrived, and leaves nothing under the final name. A file
lock serialises processes (DDP ranks) that ask for the same file, so it is fetched once.

The pieces were kept hand-written after comparing ``torch.hub.download_url_to_file``: it has
no timeout (a stalled connection waits forever) and does not fsync the file before the
rename; :mod:`filelock` and :mod:`tqdm` are used as they are.

Example (downloaded the first time, reused afterwards; :func:`cached_download` has one that
runs offline)::

    from cvt_mm.checkpoint.hub import cached_download

    path = cached_download(
        'https://github.com/ggjy/CMT.pytorch/releases/download/release-v1/cmt_small.pth')
    # '~/.cache/torch/hub/checkpoints/cmt_small.pth'
"""
from __future__ import annotations

import hashlib
import http.client
import os
import re
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

import torch

from .io import CheckpointError, sniff_file

__all__ = ['DownloadError', 'URL_SCHEMES', 'is_url', 'cache_dir', 'cache_name', 'sha256_of',
           'download', 'cached_download']

URL_SCHEMES = ('http://', 'https://')
_CHUNK = 1 << 20
_USER_AGENT = 'cvt_mm (+urllib)'


class DownloadError(CheckpointError):
    """A checkpoint URL that could not be fetched, or whose bytes are not the expected file."""


def is_url(path) -> bool:
    """Whether ``path`` is an ``http://`` or ``https://`` URL (the schemes downloaded here).

    Example::

        >>> is_url('HTTPS://example.org/w.pth'), is_url('checkpoints/w.pth')
        (True, False)
    """
    return isinstance(path, str) and path[:8].lower().startswith(URL_SCHEMES)


def cache_dir() -> str:
    """The folder downloads are cached in: ``torch.hub.get_dir()/checkpoints`` (follows
    ``TORCH_HOME`` and ``torch.hub.set_dir``), the folder torch and MMEngine use."""
    return os.path.join(torch.hub.get_dir(), 'checkpoints')


# Hugging Face serves every repository's weights under the same few names
# (pytorch_model.bin, model.safetensors); the repository must be part of the cached name.
_HF_RESOLVE = re.compile(r'^/(?P<owner>[^/]+)/(?P<repo>[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$')


def _safe_name(text: str) -> str:
    return re.sub(r'[^A-Za-z0-9._-]+', '_', text).strip('.') or '_'


def cache_name(url: str) -> str:
    """The file name ``url`` is cached under: the last part of its path, as torch and MMEngine
    name theirs; a Hugging Face ``<owner>/<repo>/resolve/<rev>/<file>`` URL becomes
    ``<owner>--<repo>--<file>`` (``--<rev>`` added unless ``main``), since every repository
    publishes files of the same names. The query string is ignored.

    Example::

        >>> cache_name('https://huggingface.co/microsoft/cvt-13/resolve/main/pytorch_model.bin')
        'microsoft--cvt-13--pytorch_model.bin'
    """
    path = urllib.parse.urlsplit(url).path
    hf = _HF_RESOLVE.match(path)
    if hf:
        parts = [hf['owner'], hf['repo']]
        rev = urllib.parse.unquote(hf['rev'])
        if rev != 'main':
            parts.append(rev)
        parts.append(urllib.parse.unquote(hf['file']))
        return '--'.join(_safe_name(p) for p in parts)
    name = urllib.parse.unquote(path.rsplit('/', 1)[-1])
    if not name:
        raise DownloadError(f'{url} names no file (its path ends with "/"); give the URL of '
                            'the checkpoint file itself')
    return _safe_name(name)


def sha256_of(path: str) -> str:
    """Hex SHA-256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(_CHUNK), b''):
            digest.update(block)
    return digest.hexdigest()


class _Progress:
    """A byte counter on stderr: tqdm's bar when tqdm is installed, else one updating line."""

    def __init__(self, total: Optional[int], label: str, enabled: bool):
        self.bar, self.done, self.total, self.label = None, 0, total, label
        self.enabled = enabled
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm comes with mmdet, not with the core stack
            return
        self.bar = tqdm(total=total, desc=label, unit='B', unit_scale=True,
                        unit_divisor=1024, file=sys.stderr, leave=True)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled:
            total = f' of {self.total / 2**20:.1f}' if self.total else ''
            print(f'\r{self.label}: {self.done / 2**20:.1f}{total} MiB', end='',
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(file=sys.stderr, flush=True)


def _http_error(url: str, err: urllib.error.HTTPError, dst: str) -> DownloadError:
    advice = {
        401: 'the file is not public (it needs a login)',
        403: 'the server refuses access (not public, or a mirror or proxy blocks it)',
        404: 'there is no file at this URL (a typo, or it was moved or removed)',
        410: 'the file was removed from this URL',
        429: 'the server is rate-limiting; wait and run again',
    }.get(err.code, 'the server could not deliver the file; run again later')
    return DownloadError(
        f'cannot download {url}: HTTP {err.code} {err.reason}: {advice}. Nothing was written '
        f'to {dst}. Check the URL, or download the file in a browser and point to it by path.')


def _fsync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def download(url: str, dst: str, sha256: Optional[str] = None,
             progress: Optional[bool] = None, timeout: float = 30.0) -> str:
    """Download ``url`` to ``dst`` atomically and return ``dst``.

    The bytes are written to ``<dst>.<pid>.<random>.part`` beside ``dst``, flushed to disk
    (fsync), checked, then renamed onto ``dst`` (``os.replace``; an existing ``dst`` is
    replaced only by a complete, verified file).

    Args:
        url (str): an ``http://`` or ``https://`` URL (redirects are followed).
        dst (str): where the file goes; its folder is created.
        sha256 (str, optional): the file's expected hex SHA-256. Defaults to None (not checked).
        progress (bool, optional): show a progress bar on stderr. Defaults to None: only
            when stderr is a terminal.
        timeout (float): seconds a connection or read may stall. Defaults to 30.

    Raises:
        DownloadError: an HTTP error (status and URL named), a network failure, a transfer cut
            short (bytes received vs ``Content-Length``), an HTML page instead of a file, a
            SHA-256 mismatch (expected vs received) or a file that cannot be written. Nothing
            is left under ``dst`` nor any ``.part`` file.

    Example (:func:`cached_download` calls it; it needs the network)::

        download('https://example.org/cmt_small.pth', 'checkpoints/cmt_small.pth',
                 sha256=None, progress=False)
    """
    if not is_url(url):
        raise DownloadError(f'cannot download {url!r}: only http:// and https:// URLs are '
                            'downloaded')
    folder = os.path.dirname(os.path.abspath(dst))
    tmp = f'{dst}.{os.getpid()}.{secrets.token_hex(4)}.part'
    if progress is None:
        progress = sys.stderr.isatty()
    request = urllib.request.Request(url, headers={'User-Agent': _USER_AGENT})
    try:
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as err:
            raise _http_error(url, err, dst) from err
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
            reason = getattr(err, 'reason', None) or err
            raise DownloadError(
                f'cannot download {url}: {reason}. Check the network connection (and a proxy: '
                'HTTPS_PROXY), or download the file elsewhere and point to it by path.') from err
        with response:
            length = response.headers.get('Content-Length')
            expected = int(length) if length and length.isdigit() else None
            try:
                os.makedirs(folder, exist_ok=True)
                out = open(tmp, 'xb')
            except OSError as err:
                raise DownloadError(f'cannot write {dst}: {err.strerror or err} (is its folder '
                                    'writable?)') from err
            digest, received = hashlib.sha256(), 0
            bar = _Progress(expected, os.path.basename(dst), progress)
            try:
                with out:
                    while True:
                        try:
                            block = response.read(_CHUNK)
                        except (OSError, http.client.HTTPException) as err:
                            raise DownloadError(
                                f'download of {url} failed after {received} of '
                                f'{expected if expected is not None else "?"} bytes: '
                                f'{type(err).__name__}: {err}. Nothing was saved under {dst}; '
                                'run again to retry.') from err
                        if not block:
                            break
                        try:
                            out.write(block)
                        except OSError as err:
                            raise DownloadError(
                                f'cannot write {dst}: {err.strerror or err} (is there space '
                                'left on the disk?)') from err
                        digest.update(block)
                        received += len(block)
                        bar.update(len(block))
                    out.flush()
                    os.fsync(out.fileno())
            finally:
                bar.close()
        if expected is not None and received != expected:
            raise DownloadError(
                f'download of {url} was cut short: received {received} of {expected} bytes '
                f'(the connection closed early). Nothing was saved under {dst}; run again to '
                'retry.')
        kind = sniff_file(tmp)
        if kind in ('html', 'empty'):
            what = 'an HTML page' if kind == 'html' else 'an empty answer'
            raise DownloadError(
                f'{url} returned {what} ({received} bytes), not a weight file: a sharing or '
                'login page (OneDrive, Google Drive, a release page) rather than the file. Open '
                f'it in a browser and download the file itself. Nothing was saved under {dst}.')
        got = digest.hexdigest()
        if sha256 and got != sha256.lower():
            raise DownloadError(
                f'{url}: SHA-256 mismatch: expected {sha256.lower()}, received {got} '
                f'({received} bytes). The server sent another file than the one published '
                '(changed upstream, or a mirror or proxy altered it); nothing was saved under '
                f'{dst}. Check the source; if the file changed on purpose, update its sha256.')
        os.replace(tmp, dst)
        _fsync_dir(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return dst


def _lock(path: str):
    """An inter-process lock on ``path`` (filelock, a torch dependency), or a no-op."""
    try:
        from filelock import FileLock
    except ImportError:  # pragma: no cover - torch installs filelock
        import contextlib
        return contextlib.nullcontext()
    return FileLock(path)


def cached_download(url: str, sha256: Optional[str] = None, file_name: Optional[str] = None,
                    progress: Optional[bool] = None, folder: Optional[str] = None) -> str:
    """The local path of ``url``'s file in the hub cache, downloaded the first time.

    Args:
        url (str): an ``http://`` or ``https://`` URL.
        sha256 (str, optional): the expected hex SHA-256, checked on download and on every
            later use of the cached file. Defaults to None (not checked).
        file_name (str, optional): the name in the cache. Defaults to :func:`cache_name`.
        progress (bool, optional): progress bar; defaults to None (only on a terminal).
        folder (str, optional): the cache folder. Defaults to :func:`cache_dir`.

    Raises:
        DownloadError: see :func:`download`; also a cached file whose SHA-256 is not the
            expected one (it was put there by something else: delete it to download again).

    Returns:
        str: the cached file's path (``~/.cache/torch/hub/checkpoints/...`` by default).

    Example: a file already in the cache is not downloaded again, and checked when its
    SHA-256 is given::

        >>> import hashlib, os
        >>> os.makedirs('hub', exist_ok=True)
        >>> with open('hub/weights.pth', 'wb') as f:
        ...     _ = f.write(b'weights')
        >>> url = 'https://example.org/releases/weights.pth'
        >>> cached_download(url, folder='hub', sha256=hashlib.sha256(b'weights').hexdigest())
        'hub/weights.pth'
        >>> cached_download(url, folder='hub', sha256='0' * 64)
        Traceback (most recent call last):
        ...
        cvt_mm.checkpoint.hub.DownloadError: the cached copy of ...hub/weights.pth has SHA-256 ...
    """
    if not is_url(url):
        raise DownloadError(f'cannot download {url!r}: only http:// and https:// URLs are '
                            'downloaded')
    folder = folder or cache_dir()
    path = os.path.join(folder, file_name or cache_name(url))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise DownloadError(f'cannot create the checkpoint cache {folder}: '
                            f'{err.strerror or err} (set TORCH_HOME to a writable folder)') from err
    # One process downloads, the others (DDP ranks on this machine) wait and reuse the file.
    # Lock files stay (removing one under another waiting process would be a race), so they
    # live apart, in .locks/, as Hugging Face's cache keeps them.
    locks = os.path.join(folder, '.locks')
    os.makedirs(locks, exist_ok=True)
    with _lock(os.path.join(locks, os.path.basename(path) + '.lock')):
        if not os.path.isfile(path):
            download(url, path, sha256=sha256, progress=progress)
        elif sha256:
            found = sha256_of(path)
            if found != sha256.lower():
                raise DownloadError(
                    f'the cached copy of {url} at {path} has SHA-256 {found}, not the published '
                    f'{sha256.lower()}: it was not written by this downloader, or was changed '
                    'since. Delete it to download the file again.')
    return path
