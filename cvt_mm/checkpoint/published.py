"""The published ImageNet checkpoints of CvT and CMT, one row per file: what it is, where
it is, under which terms (as timm keeps per-variant pretrained metadata in one table). Behind
the "file not found" hints, the SHA-256 the downloader checks and
``tools/misc/download_checkpoints.py``; docs/checkpoints.md says where each fact comes from.

Example::

    >>> published_by_name('cmt-small').url
    'https://github.com/ggjy/CMT.pytorch/releases/download/release-v1/cmt_small.pth'
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

__all__ = ['PublishedCheckpoint', 'PUBLISHED', 'DOWNLOAD_TOOL', 'published', 'published_by_name',
           'published_for_url', 'download_hint']


@dataclass(frozen=True)
class PublishedCheckpoint:
    """One published ImageNet checkpoint: what it is, where it is, under which terms.

    Attributes:
        name (str): what ``tools/misc/download_checkpoints.py`` selects it by (``'cvt-13'``).
        family (str): ``'cvt'`` or ``'cmt'``.
        arch (str): the backbone ``arch`` it fits (``'13'``, ``'w24'``, ``'s'``, ...).
        filename (str): the file name our configs expect under ``checkpoints/`` (the name the
            authors publish it under).
        url (str): a direct download URL.
        input_size (int): the square resolution it was trained (or fine-tuned) at.
        top1 (float): ImageNet-1k top-1 accuracy (%) as the authors report it.
        pretrain (str): ``'IN-1k'``, or ``'IN-22k'`` (then fine-tuned on ImageNet-1k).
        licence (str): SPDX identifier of the terms the file at ``url`` is published under, or
            ``'unknown'``.
        sha256 (str, optional): hex SHA-256 of the file at ``url``; None where not known.
            Defaults to None.
        manual (str): where the authors' own file is when it has no direct link (CvT's
            OneDrive model zoo); ``''`` when ``url`` is the authors' file. Defaults to ``''``.

    Example::

        >>> entry = published_by_name('cmt-small')
        >>> entry.filename, entry.input_size, entry.top1
        ('cmt_small.pth', 224, 83.5)
    """
    name: str
    family: str
    arch: str
    filename: str
    url: str
    input_size: int
    top1: float
    pretrain: str
    licence: str
    sha256: Optional[str] = None
    manual: str = ''


# The official CvT files (microsoft/CvT README, "model zoo") are in a OneDrive folder, which has
# no stable direct link; the URLs below are Hugging Face's conversions of the same weights,
# which the CvT loader reads as they are (layout 'cvt-huggingface').
_CVT_MODEL_ZOO = 'https://1drv.ms/u/s!AhIXJn_J-blW9RzF3rMW7SsLHa8h?e=blQ0Al'
_HF = 'https://huggingface.co/microsoft/{}/resolve/main/pytorch_model.bin'
# Linked from huawei-noah/Efficient-AI-Backbones/cmt_pytorch/README.md (released July 2022;
# the first cmt_xs.pth upload was a copy of cmt_small.pth, replaced on 2022-07-01,
# ggjy/CMT.pytorch issue #1).
_CMT_RELEASE = 'https://github.com/ggjy/CMT.pytorch/releases/download/release-v1/'

# Where each fact comes from: docs/checkpoints.md, "Where the facts come from".
PUBLISHED: Tuple[PublishedCheckpoint, ...] = (
    PublishedCheckpoint('cvt-13', 'cvt', '13', 'CvT-13-224x224-IN-1k.pth', _HF.format('cvt-13'),
                        224, 81.6, 'IN-1k', 'apache-2.0', manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-13-384', 'cvt', '13', 'CvT-13-384x384-IN-1k.pth',
                        _HF.format('cvt-13-384'), 384, 83.0, 'IN-1k', 'apache-2.0',
                        'bac7a58899c41b4cd90bfded50f1d4e1cf283c2d3255e3fce7ff7350e0d23438',
                        manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-13-384-22k', 'cvt', '13', 'CvT-13-384x384-IN-22k.pth',
                        _HF.format('cvt-13-384-22k'), 384, 83.3, 'IN-22k', 'apache-2.0',
                        manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-21', 'cvt', '21', 'CvT-21-224x224-IN-1k.pth', _HF.format('cvt-21'),
                        224, 82.5, 'IN-1k', 'apache-2.0', manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-21-384', 'cvt', '21', 'CvT-21-384x384-IN-1k.pth',
                        _HF.format('cvt-21-384'), 384, 83.3, 'IN-1k', 'apache-2.0',
                        'c19b5977814f89e610d6e8e30582586ff02168a7e8dcd7a117aa9fa5a234e051',
                        manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-21-384-22k', 'cvt', '21', 'CvT-21-384x384-IN-22k.pth',
                        _HF.format('cvt-21-384-22k'), 384, 84.9, 'IN-22k', 'apache-2.0',
                        manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cvt-w24-384-22k', 'cvt', 'w24', 'CvT-w24-384x384-IN-22k.pth',
                        _HF.format('cvt-w24-384-22k'), 384, 87.6, 'IN-22k', 'apache-2.0',
                        manual=_CVT_MODEL_ZOO),
    PublishedCheckpoint('cmt-tiny', 'cmt', 'ti', 'cmt_tiny.pth', _CMT_RELEASE + 'cmt_tiny.pth',
                        160, 79.0, 'IN-1k', 'MIT'),
    PublishedCheckpoint('cmt-xs', 'cmt', 'xs', 'cmt_xs.pth', _CMT_RELEASE + 'cmt_xs.pth',
                        192, 81.8, 'IN-1k', 'MIT'),
    PublishedCheckpoint('cmt-small', 'cmt', 's', 'cmt_small.pth', _CMT_RELEASE + 'cmt_small.pth',
                        224, 83.5, 'IN-1k', 'MIT'),
    PublishedCheckpoint('cmt-base', 'cmt', 'b', 'cmt_base.pth', _CMT_RELEASE + 'cmt_base.pth',
                        256, 84.5, 'IN-1k', 'MIT'),
)

DOWNLOAD_TOOL = 'tools/misc/download_checkpoints.py'


def published(family: Optional[str] = None) -> List[PublishedCheckpoint]:
    """The published checkpoints of a family.

    Args:
        family (str, optional): ``'cvt'`` or ``'cmt'``. Default None: all of :data:`PUBLISHED`.

    Returns:
        list[PublishedCheckpoint]: the rows, in :data:`PUBLISHED`'s order.

    Example::

        >>> [p.name for p in published('cmt')]
        ['cmt-tiny', 'cmt-xs', 'cmt-small', 'cmt-base']
    """
    return [p for p in PUBLISHED if family is None or p.family == family]


def published_by_name(name: str) -> Optional[PublishedCheckpoint]:
    """A published checkpoint by its name or file name, case-insensitively.

    Args:
        name (str): ``'cvt-13'`` (as ``tools/misc/download_checkpoints.py`` takes it) or the
            file's name (``'cmt_small.pth'``).

    Returns:
        PublishedCheckpoint | None: the row, or None when there is none.

    Example::

        >>> published_by_name('CMT_small.pth').name
        'cmt-small'
    """
    name = name.lower()
    return next((p for p in PUBLISHED if name in (p.name, p.filename.lower())), None)


def published_for_url(url: str) -> Optional[PublishedCheckpoint]:
    """The published checkpoint at a URL, so a download can be checked against its SHA-256.

    Args:
        url (str): a download URL; a query string is ignored.

    Returns:
        PublishedCheckpoint | None: the row whose ``url`` it is, or None.

    Example::

        >>> entry = published_by_name('cmt-small')
        >>> published_for_url(entry.url + '?download=1') == entry
        True
    """
    url = url.split('?', 1)[0]
    return next((p for p in PUBLISHED if p.url == url), None)


def download_hint(path: str, family: Optional[str] = None) -> str:
    """Where to get a missing checkpoint, for the errors of :func:`~.io.read_local`.

    Args:
        path (str): the checkpoint path that was not found.
        family (str, optional): ``'cvt'`` or ``'cmt'``: list that family's checkpoints when
            the file's name is none of them. Default None.

    Returns:
        str: the checkpoint published under the file's name, else the family's, with the
        command that downloads them; ``''`` when nothing is known.

    Example::

        >>> print(download_hint('checkpoints/cmt_small.pth'))
        <BLANKLINE>
        Published cmt checkpoint:
          cmt_small.pth (cmt-small): https://github.com/ggjy/CMT.pytorch/releases/...
        Get it with: python tools/misc/download_checkpoints.py cmt-small ...
    """
    same_name = published_by_name(os.path.basename(path))
    entries = [same_name] if same_name else published(family) if family else []
    if not entries:
        return ''
    lines = [f'  {p.filename} ({p.name}): {p.url}' for p in entries]
    for manual in dict.fromkeys(p.manual for p in entries if p.manual):
        lines.append(f"  (the authors' own files, same weights: {manual}, a OneDrive folder "
                     'without direct links: download by hand)')
    one = len(entries) == 1
    names = entries[0].name if one else f"'{entries[0].family}-*'"
    return (f'\nPublished {entries[0].family} checkpoint{"" if one else "s"}:\n'
            + '\n'.join(lines)
            + f'\nGet {"it" if one else "them"} with: python {DOWNLOAD_TOOL} {names} (into '
            "checkpoints/), or give the URL itself as init_cfg's checkpoint (downloaded once "
            'into the torch hub cache). python tools/model_converters/convert_weights.py SRC DST '
            'rewrites any of '
            "them in this project's layout.")
