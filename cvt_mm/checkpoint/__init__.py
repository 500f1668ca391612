"""Checkpoint I/O in layers, each importing only those below it:

==================  =======================================================================
:mod:`.io`          reading weight files safely, writing files atomically (bottom)
:mod:`.hub`         downloading a URL once into the torch hub cache, told the SHA-256
:mod:`.published`   the table of published CvT and CMT ImageNet checkpoints (data only)
:mod:`.formats`     checkpoint layouts recognised by their keys; families register theirs
:mod:`.loading`     reading paths and URLs, loading into a model
:mod:`.convert`     rewriting a checkpoint in our layout, and its command line (top)
==================  =======================================================================

Each backbone family's layouts and key-renaming rules live in its file
(``cvt_mm/models/cvt.py``, ``cmt.py``).

Reading is safe on every supported torch (no pickled code runs), paths and ``https://`` URLs
alike; a file that is no checkpoint, or another architecture's, is refused with a
:class:`CheckpointError` that says which and what to do.

Example: a CMT-Ti checkpoint into the backbone (the official layout loads the same way)::

    >>> import logging, torch
    >>> from cvt_mm.checkpoint import detect_format, load_pretrained, read_checkpoint
    >>> from cvt_mm.models import CMT, CMTModel
    >>> torch.save({'model': CMTModel('ti').state_dict()}, 'cmt_tiny.pth')
    >>> backbone = CMT(arch='ti')
    >>> load_pretrained(backbone, 'cmt_tiny.pth', 'cmt', logger=logging.getLogger('my_run'))
    >>> detect_format(read_checkpoint('cmt_tiny.pth')['model']).name
    'cmt-ours'
"""
from .convert import convert_checkpoint
from .formats import (
    StateDict,
    WeightFormat,
    convert_state_dict,
    detect_format,
    extract_state_dict,
    known_formats,
    register_format,
)
from .hub import DownloadError, cached_download, is_url
from .io import CheckpointError, read_local, sniff_file, write_atomically
from .loading import (
    arch_of,
    checkpoint_misfit,
    load_from_http,
    load_from_local,
    load_pretrained,
    read_checkpoint,
)
from .published import (
    PUBLISHED,
    PublishedCheckpoint,
    download_hint,
    published,
    published_by_name,
    published_for_url,
)

__all__ = ['StateDict', 'WeightFormat', 'convert_state_dict', 'detect_format',
           'extract_state_dict', 'known_formats', 'register_format', 'DownloadError',
           'cached_download', 'is_url', 'CheckpointError', 'read_local', 'sniff_file',
           'write_atomically', 'arch_of', 'checkpoint_misfit', 'convert_checkpoint',
           'load_from_http', 'load_from_local', 'load_pretrained', 'read_checkpoint', 'PUBLISHED',
           'PublishedCheckpoint', 'download_hint', 'published', 'published_by_name',
           'published_for_url']
