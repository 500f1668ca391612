"""Everything this project knows about checkpoint formats, in one place.

A backbone family (``'cvt'``, ``'cmt'``) has several on-disk layouts: the official model-zoo
files, Hugging Face ``transformers`` files and this project's own layout (the keys of the
backbone's ``state_dict()``, possibly wrapped in an MMEngine checkpoint and prefixed with
``backbone.`` by a detector, segmentor or classifier). Each layout is a :class:`WeightFormat`
registered below: how to recognise it from its keys and how to rename it into ours. Loading
(:func:`load_pretrained`) then has one behaviour for all of them:

* the file is read with ``torch.load(weights_only=True)`` (or safetensors): a weight file from
  the internet is never unpickled as arbitrary code; an ``http(s)://`` URL is downloaded once
  into the torch hub cache first (``cvt_mm.hub``);
* a checkpoint of another architecture (tensors of another shape, parameters the file lacks
  or keys the model lacks, outside the classifier head and our optional output norms) raises,
  naming the keys and the architecture each side looks like; ``allow_partial=True`` loads what
  fits instead and logs the rest by name;
* a classifier head whose ``num_classes`` differs is skipped with a warning;
* a model may adapt tensors whose shape legitimately depends on the input resolution (CMT's
  relative position biases) through ``adapt_pretrained_state_dict``.

:data:`PUBLISHED` is the one table of published ImageNet checkpoints (file, URL, resolution,
top-1, licence, SHA-256) behind the "file not found" hints, the hub's checksums and
``tools/misc/download_checkpoints.py``.
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch
from mmengine.logging import MMLogger, print_log

StateDict = Dict[str, torch.Tensor]

# Containers under which checkpoints keep their weights, outermost first.
_CONTAINER_KEYS = ('state_dict', 'model', 'module', 'model_state')
# Prefixes that wrappers add in front of the backbone's own keys.
_WRAPPER_PREFIXES = ('module.', 'backbone.')


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used for the model it was given to."""


@dataclass(frozen=True)
class WeightFormat:
    """One on-disk layout of one backbone family.

    ``matches(keys)`` recognises the layout from the set of keys; ``to_ours(state_dict)``
    renames (and if needed reshapes) it into this project's layout.
    """
    name: str
    family: str
    matches: Callable[[set], bool]
    to_ours: Callable[[StateDict], StateDict]
    description: str = ''


_FORMATS: List[WeightFormat] = []


def register_format(fmt: WeightFormat) -> WeightFormat:
    _FORMATS.append(fmt)
    return fmt


def formats(family: Optional[str] = None) -> List[WeightFormat]:
    return [f for f in _FORMATS if family is None or f.family == family]


# --------------------------------------------------------------------------------------------
# Where the pretrained weights are published (one table: the hints, the hub, the tool)
# --------------------------------------------------------------------------------------------
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

# Where the facts come from:
# * top-1: microsoft/CvT README "Main results" (CvT), ggjy/CMT.pytorch README (CMT).
# * files: every microsoft/cvt-* repository has pytorch_model.bin on its main branch; cvt-13
#   also model.safetensors (added by Hugging Face's safetensors convert bot), the others only
#   in unmerged pull requests. pytorch_model.bin for all: one kind of file, a real torch file
#   under the .pth name the configs expect, read with weights_only=True like any other.
# * licences: 'apache-2.0' is the licence field of each microsoft/cvt-* model card on Hugging
#   Face. That of the official OneDrive files could not be established (microsoft/CvT's README
#   states none for the weights): docs/checkpoints.md says "unknown" for them. CMT: the README
#   of ggjy/CMT.pytorch, whose release hosts the files, has a "License: MIT" section (the code's
#   copy in huawei-noah/Efficient-AI-Backbones is Apache-2.0, cmt_pytorch/License.txt).
# * sha256: the Git LFS SHA256 that Hugging Face shows on a file's page, where it could be
#   looked up (pytorch_model.bin of microsoft/cvt-13-384 and cvt-21-384 on main); None
#   elsewhere: no network here to hash the files, and a hash is never guessed.
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
    """The rows of :data:`PUBLISHED` of ``family`` (all when ``None``)."""
    return [p for p in PUBLISHED if family is None or p.family == family]


def published_by_name(name: str) -> Optional[PublishedCheckpoint]:
    """The row called ``name`` (``'cvt-13'``) or published as file ``name``
    (``'cmt_small.pth'``), case-insensitively; ``None`` when there is none."""
    name = name.lower()
    return next((p for p in PUBLISHED if name in (p.name, p.filename.lower())), None)


def published_for_url(url: str) -> Optional[PublishedCheckpoint]:
    """The row whose download URL is ``url`` (a query string ignored), or ``None``."""
    url = url.split('?', 1)[0]
    return next((p for p in PUBLISHED if p.url == url), None)


def download_hint(path: str, family: Optional[str] = None) -> str:
    """Where to get a missing checkpoint: the row published under the file's name, else the
    ``family``'s rows; ``''`` when nothing is known.

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


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------
_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's default (zip) format
_PICKLE_PROTOCOL_BYTE = 0x80  # torch.save's legacy format: a pickle stream


def sniff_file(path: str) -> str:
    """What a file holds, from its first bytes: ``'empty'``, ``'html'``, ``'zip'``,
    ``'pickle'``, ``'safetensors'`` or ``'unknown'``."""
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


def _not_a_file_error(path: str, family: Optional[str]) -> CheckpointError:
    if re.match(r'^[a-z][a-z0-9+.-]*://', path, re.I):  # http(s):// never gets here
        return CheckpointError(
            f'checkpoint {path} is a URL; download the file first and point to it by path '
            '(only http:// and https:// URLs are downloaded, into the torch hub cache)'
            f'{download_hint(path, family)}')
    if os.path.isdir(path):
        inside = sorted(f for f in os.listdir(path)
                        if f.endswith(('.pth', '.pt', '.bin', '.ckpt', '.safetensors')))
        found = f' (weight files inside: {", ".join(inside[:8])})' if inside else \
            ' (no .pth/.pt/.bin/.ckpt/.safetensors file inside)'
        return CheckpointError(f'checkpoint {path} is a directory, not a file{found}; '
                               'point to the weight file itself')
    return CheckpointError(f'checkpoint file not found: {path}{download_hint(path, family)}')


def _unreadable_error(path: str, kind: str, err: Exception,
                      family: Optional[str]) -> CheckpointError:
    """The reason a file could not be read, in the user's terms; never advice to turn safe
    loading off (torch's own message suggests ``weights_only=False``)."""
    size = os.path.getsize(path)
    hint = download_hint(path, family) or '\nDownload it again from where it is published.'
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


def read_checkpoint(path: str, family: Optional[str] = None) -> dict:
    """Read a ``.pth``/``.pt``/``.bin``/``.ckpt`` (safe unpickling) or ``.safetensors`` file.

    ``path`` may be an ``http://`` or ``https://`` URL: the file is downloaded once into the
    torch hub cache and checked against its SHA-256 when :data:`PUBLISHED` knows it (see
    :mod:`cvt_mm.hub`), then read like a local file. A path that is not a readable weight file
    (missing, another kind of URL, a directory, empty, an HTML page, truncated, carrying
    pickled objects) raises :class:`CheckpointError` saying which of these it is and what to
    do; a failed download raises its subclass ``cvt_mm.hub.DownloadError``. ``family``
    (``'cvt'``, ``'cmt'``) adds where that family's weights are published.

    Example::

        >>> ckpt = read_checkpoint('checkpoints/cmt_small.pth', 'cmt')
        >>> ckpt = read_checkpoint('https://github.com/ggjy/CMT.pytorch/releases/download/'
        ...                        'release-v1/cmt_small.pth', 'cmt')  # cached after the first
    """
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(f'checkpoint must be a file path, got {type(path).__name__}')
    path = os.fspath(path)
    if path[:8].lower().startswith(('http://', 'https://')):
        from .hub import cached_download  # the hub imports this module
        path = cached_download(path)
    if not os.path.isfile(path):
        raise _not_a_file_error(path, family)
    kind = sniff_file(path)
    if kind in ('empty', 'html', 'unknown'):
        raise _unreadable_error(path, kind, None, family)
    try:
        if kind == 'safetensors' or path.endswith('.safetensors'):
            from safetensors.torch import load_file
            return dict(load_file(path, device='cpu'))
        # DeiT/timm-style training scripts (CMT's among them) store their argparse Namespace
        # beside the weights: a plain attribute bag, safe to rebuild.
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as err:  # noqa: BLE001 - re-raised with the path, the cause kept
        raise _unreadable_error(path, kind, err, family) from err


def extract_state_dict(ckpt: dict, prefix: Optional[str] = None) -> Tuple[StateDict, int]:
    """Unwrap containers and wrapper prefixes; return the tensors and how many keys were
    dropped because they belong to other parts of a wrapping model (neck, heads, ...).

    ``prefix`` (as in MMEngine's ``Pretrained`` init) selects the keys under it explicitly;
    without it ``module.`` and ``backbone.`` are stripped when present.
    """
    if not isinstance(ckpt, dict):
        raise CheckpointError(f'a checkpoint must hold a dict, got {type(ckpt).__name__}')
    for key in _CONTAINER_KEYS:
        if key in ckpt and isinstance(ckpt[key], dict):
            ckpt = ckpt[key]
            break
    sd = {k: v for k, v in ckpt.items() if isinstance(v, torch.Tensor)}
    if not sd:
        raise CheckpointError('the checkpoint holds no tensors (looked in '
                              f'{", ".join(_CONTAINER_KEYS)} and the top level)')
    prefixes = [prefix] if prefix else list(_WRAPPER_PREFIXES)
    dropped = 0
    for p in prefixes:
        if not p.endswith('.'):
            p += '.'
        under = {k[len(p):]: v for k, v in sd.items() if k.startswith(p)}
        if under:
            dropped += len(sd) - len(under)
            sd = under
        elif prefix:
            raise CheckpointError(f'no key in the checkpoint starts with prefix {p!r}; '
                                  f'first keys: {list(sd)[:5]}')
    return sd, dropped


def detect_format(sd: StateDict, family: Optional[str] = None) -> WeightFormat:
    """The layout of ``sd`` among ``family``'s (or every family's, when ``None``)."""
    keys = set(sd)
    candidates = formats(family)
    for fmt in candidates:
        if fmt.matches(keys):
            return fmt
    what = f'a {family}' if family else 'a ' + ' or '.join(sorted({f.family for f in candidates}))
    raise CheckpointError(
        f'cannot recognise the checkpoint as {what} model; known layouts: '
        f'{", ".join(f.name for f in candidates)}. First keys: {sorted(keys)[:8]}')


def convert_state_dict(sd: StateDict, family: Optional[str] = None) -> Tuple[StateDict, str]:
    """Rename any known layout of ``family`` (any family when ``None``) into ours; returns
    (state_dict, format name)."""
    fmt = detect_format(sd, family)
    return fmt.to_ours(sd), fmt.name


def format_family(name: str) -> str:
    return next(f.family for f in _FORMATS if f.name == name)


def convert_checkpoint(src: str, dst: str, family: Optional[str] = None,
                       prefix: Optional[str] = None, add_prefix: str = '') -> dict:
    """Rewrite any known layout in ``src`` as a clean backbone checkpoint in our layout.

    Other modules' keys (neck, heads), optimizer state and message hub are dropped. ``dst`` is a
    ``.pth`` holding ``{'state_dict': ..., 'meta': ...}`` or a ``.safetensors`` file, written
    whole or not at all; ``add_prefix`` (e.g. ``'backbone.'``) nests the keys under a prefix.
    Returns the ``meta`` written.

    Example::

        >>> convert_checkpoint('checkpoints/cmt_small.pth', 'checkpoints/cmt_s_ours.pth')['family']
        'cmt'
    """
    import io

    from .engine.fileio import write_atomically
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError(f'the output must not overwrite the input checkpoint {src}')
    if add_prefix and not add_prefix.endswith('.'):
        raise ValueError(f'--add-prefix must end with ".", got {add_prefix!r} (e.g. "backbone.")')
    sd, dropped = extract_state_dict(read_checkpoint(src, family), prefix)
    sd, fmt_name = convert_state_dict(sd, family)
    # Slices of bigger tensors would otherwise drag their whole storage into the file.
    sd = {add_prefix + k: v.detach().clone().contiguous() for k, v in sd.items()}
    meta = dict(family=format_family(fmt_name), source=os.path.abspath(src),
                source_format=fmt_name, dropped_wrapper_keys=dropped, num_tensors=len(sd))
    if dst.endswith('.safetensors'):
        from safetensors.torch import save
        data = save(sd, metadata={k: str(v) for k, v in meta.items()})
    else:
        buffer = io.BytesIO()
        torch.save({'state_dict': sd, 'meta': meta}, buffer)
        data = buffer.getvalue()
    try:
        write_atomically(data, dst)
    except OSError as err:
        raise ValueError(f'cannot write {dst}: {err.strerror or err} (is its folder writable, '
                         'with space left?)') from err
    return meta


# --------------------------------------------------------------------------------------------
# Loading into a model
# --------------------------------------------------------------------------------------------
# Keys a backbone may lack in a checkpoint or ignore from it without being the wrong model:
# the classifier head (absent in headless files, different class count) and our optional
# output norms for dense heads (no official file has them).
_OPTIONAL_PREFIXES = ('out_norms.', )


def arch_of(sd: StateDict, arch_zoo: Dict[str, dict], family: str) -> str:
    """Name the architecture a state dict in our layout looks like: ``'CvT-13'``, or
    ``'a custom arch (depths [...], embed_dims [...])'`` when no zoo entry matches."""
    depths: Dict[int, int] = {}
    dims: Dict[int, int] = {}
    for key, value in sd.items():
        block = re.match(r'stages\.(\d+)\.blocks\.(\d+)\.', key)
        if block:
            stage, index = int(block.group(1)), int(block.group(2))
            depths[stage] = max(depths.get(stage, 0), index + 1)
        embed = re.match(r'stages\.(\d+)\.patch_embed\.proj\.weight$', key)
        if embed:
            dims[int(embed.group(1))] = value.shape[0]
    stages = sorted(set(depths) | set(dims))
    found_depths = [depths.get(i, 0) for i in stages]
    found_dims = [dims.get(i, 0) for i in stages]
    label = {'cvt': 'CvT', 'cmt': 'CMT'}.get(family, family)
    for name, spec in arch_zoo.items():
        if list(spec['depths']) == found_depths and list(spec['embed_dims']) == found_dims:
            return f'{label}-{name.upper() if family == "cmt" else name}'
    return f'a custom {label} arch (depths {found_depths}, embed_dims {found_dims})'


def load_pretrained(model: torch.nn.Module, path: str, family: str,
                    prefix: Optional[str] = None,
                    head_prefixes: Tuple[str, ...] = ('head.', ),
                    allow_partial: bool = False,
                    logger: Optional[MMLogger] = None) -> None:
    """Load any known layout of ``family`` from ``path`` into ``model`` (see module doc).

    A checkpoint of another architecture (keys the model lacks, or model parameters the
    checkpoint lacks, outside the classifier head and our optional output norms) raises
    :class:`CheckpointError` naming both architectures, unless ``allow_partial`` (then the
    parts that fit are loaded, the rest keeps its initialisation, and the keys are logged).
    """
    logger = logger or MMLogger.get_current_instance()
    sd, dropped = extract_state_dict(read_checkpoint(path, family), prefix)
    sd, fmt_name = convert_state_dict(sd, family)
    if hasattr(model, 'adapt_pretrained_state_dict'):
        sd = model.adapt_pretrained_state_dict(sd)

    own = model.state_dict()
    skipped_head, mismatched = [], []
    for key in list(sd):
        if key in own and own[key].shape != sd[key].shape:
            if key.startswith(head_prefixes):
                skipped_head.append(f'{key} (checkpoint {tuple(sd[key].shape)}, '
                                    f'model {tuple(own[key].shape)})')
                del sd[key]
            else:
                mismatched.append(f'{key}: checkpoint {tuple(sd[key].shape)} vs model '
                                  f'{tuple(own[key].shape)}')
    tolerated = tuple(head_prefixes) + _OPTIONAL_PREFIXES

    def matters(key: str) -> bool:  # BN's step counter: absent from some published files
        return not key.startswith(tolerated) and not key.endswith('num_batches_tracked')

    missing = sorted(filter(matters, set(own) - set(sd)))
    unused = sorted(filter(matters, set(sd) - set(own)))
    if (mismatched or missing or unused) and not allow_partial:
        zoo = getattr(type(model), 'arch_zoo', {})
        listed = '; '.join(
            f'{len(items)} {what}: {", ".join(items[:3])}{", ..." if len(items) > 3 else ""}'
            for what, items in (('tensors of another shape', mismatched),
                                ('model parameters not in the file', missing),
                                ('keys of the file the model lacks', unused)) if items)
        raise CheckpointError(
            f'{path} ({fmt_name}) does not fit the model: {listed}. The checkpoint looks like '
            f'{arch_of(sd, zoo, family)}; the model is {arch_of(own, zoo, family)}. Use the '
            "checkpoint of the model's architecture, or load what fits on purpose with "
            "init_cfg=dict(type='Pretrained', checkpoint=..., allow_partial=True).")
    if mismatched:  # allow_partial: keep the model's own values for these
        for item in mismatched:
            del sd[item.split(':')[0]]
        print_log(f'allow_partial: {len(mismatched)} tensors of another shape not loaded: '
                  + '; '.join(mismatched), logger=logger, level=30)
    result = model.load_state_dict(sd, strict=False)
    print_log(f'Loaded {type(model).__name__} weights from {path} (format: {fmt_name}, '
              f'{len(sd)} tensors)', logger=logger)
    if skipped_head:
        print_log('Skipped the classifier head (different num_classes): '
                  + ', '.join(skipped_head), logger=logger, level=30)
    if result.missing_keys:
        print_log(f'Missing keys ({len(result.missing_keys)}): '
                  f'{", ".join(result.missing_keys)}', logger=logger, level=30)
    if result.unexpected_keys:
        print_log(f'Unused keys ({len(result.unexpected_keys)}): '
                  f'{", ".join(result.unexpected_keys)}', logger=logger, level=30)


def _listed(items: List[str], limit: int = 3) -> str:
    return ', '.join(items[:limit]) + (', ...' if len(items) > limit else '')


def checkpoint_misfit(model: torch.nn.Module, path: str) -> Optional[str]:
    """How the MMEngine checkpoint at ``path`` fails to fit the whole ``model`` (detector,
    segmentor or classifier), or ``None`` when every parameter and buffer is in it with the
    model's shape. For tools that load a trained model (``tools/test.py``, the image demo),
    where MMEngine's non-strict loading would otherwise evaluate a partly random model.
    """
    ckpt = read_checkpoint(path)
    sd = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else {}
    sd = {re.sub(r'^module\.', '', k): v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    own = model.state_dict()

    def matters(key: str) -> bool:
        return not key.endswith('num_batches_tracked')

    missing = sorted(filter(matters, set(own) - set(sd)))
    mismatched = sorted(f'{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}'
                        for k in set(own) & set(sd) if sd[k].shape != own[k].shape)
    if not missing and not mismatched:
        return None
    parts = []
    if missing:
        parts.append(f'{len(missing)} of the model\'s {len(own)} parameters and buffers are not '
                     f'in it ({_listed(missing)})')
    if mismatched:
        parts.append(f'{len(mismatched)} have another shape ({_listed(mismatched)})')
    hint = ''
    if missing and all(not k.startswith('backbone.') for k in sd) and \
            any(k.startswith('backbone.') for k in own):
        hint = (' It holds no backbone.* keys: a backbone-only file initialises a backbone '
                "through init_cfg=dict(type='Pretrained', checkpoint=...); evaluate the "
                "checkpoint of a trained model instead.")
    elif mismatched and any('cls' in m or 'logits' in m or 'head' in m for m in mismatched):
        hint = (' A head of another shape usually means another number of classes: use the '
                'config the checkpoint was trained with.')
    return f'{path} does not fit the model: ' + '; '.join(parts) + '.' + hint


def regex_rename(sd: StateDict, rules: List[Tuple[str, str]]) -> StateDict:
    """Apply ``re.sub`` rules in order to every key (the first rule that matches wins)."""
    out = {}
    for key, value in sd.items():
        new = key
        for pattern, repl in rules:
            new, n = re.subn(pattern, repl, key)
            if n:
                break
        out[new] = value
    return out


# --------------------------------------------------------------------------------------------
# CvT layouts (official microsoft/CvT, Hugging Face CvtForImageClassification, ours)
# --------------------------------------------------------------------------------------------
# Ours = the official keys with ``stage{i}.`` renamed to ``stages.{i}.``:
#   stages.{i}.patch_embed.proj / .norm           (token embedding: Conv2d, LayerNorm)
#   stages.{i}.blocks.{j}.norm1 / .norm2
#   stages.{i}.blocks.{j}.attn.conv_proj_{q,k,v}.conv / .bn, .attn.proj_{q,k,v}, .attn.proj
#   stages.{i}.blocks.{j}.mlp.fc1 / .fc2
#   stages.2.cls_token, norm, head                (the classification stage)
#   out_norms.{i}                                 (ours only: optional norms for dense heads)
def _cvt_official_to_ours(sd: StateDict) -> StateDict:
    return regex_rename(sd, [(r'^stage(\d+)\.', r'stages.\1.')])


# Hugging Face CvtForImageClassification (``cvt.`` is absent in a bare CvtModel file).
_HF_STAGE = r'^(?:cvt\.)?encoder\.stages\.(\d+)\.'
_HF_BLOCK = _HF_STAGE + r'layers\.(\d+)\.'
_CVT_HF_RULES = [
    (_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.',
     r'stages.\1.patch_embed.proj.'),
    (_HF_STAGE + r'embedding\.convolution_embeddings\.normalization\.',
     r'stages.\1.patch_embed.norm.'),
    (_HF_STAGE + r'cls_token$', r'stages.\1.cls_token'),
]
for _long, _short in (('query', 'q'), ('key', 'k'), ('value', 'v')):
    _conv = _HF_BLOCK + rf'attention\.attention\.convolution_projection_{_long}\.' \
        r'convolution_projection\.'
    _CVT_HF_RULES += [
        (_conv + r'convolution\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.conv.'),
        (_conv + r'normalization\.', rf'stages.\1.blocks.\2.attn.conv_proj_{_short}.bn.'),
        (_HF_BLOCK + rf'attention\.attention\.projection_{_long}\.',
         rf'stages.\1.blocks.\2.attn.proj_{_short}.'),
    ]
_CVT_HF_RULES += [
    (_HF_BLOCK + r'attention\.output\.dense\.', r'stages.\1.blocks.\2.attn.proj.'),
    (_HF_BLOCK + r'layernorm_before\.', r'stages.\1.blocks.\2.norm1.'),
    (_HF_BLOCK + r'layernorm_after\.', r'stages.\1.blocks.\2.norm2.'),
    (_HF_BLOCK + r'intermediate\.dense\.', r'stages.\1.blocks.\2.mlp.fc1.'),
    (_HF_BLOCK + r'output\.dense\.', r'stages.\1.blocks.\2.mlp.fc2.'),
    (r'^layernorm\.', 'norm.'),
    (r'^classifier\.', 'head.'),
]


def _has_key_matching(pattern: str) -> Callable[[set], bool]:
    regex = re.compile(pattern)
    return lambda keys: any(regex.match(k) for k in keys)


register_format(WeightFormat(
    'cvt-official', 'cvt', _has_key_matching(r'stage0\.patch_embed\.proj\.weight$'),
    _cvt_official_to_ours, 'microsoft/CvT model-zoo .pth (a plain state dict)'))
register_format(WeightFormat(
    'cvt-huggingface', 'cvt',
    _has_key_matching(_HF_STAGE + r'embedding\.convolution_embeddings\.projection\.weight$'),
    lambda sd: regex_rename(sd, _CVT_HF_RULES),
    'Hugging Face transformers CvtForImageClassification / CvtModel'))
register_format(WeightFormat(
    # Keyed on the convolutional projection, which CMT's layout (also `stages.{i}.`) lacks.
    'cvt-ours', 'cvt', _has_key_matching(r'stages\.0\.blocks\.0\.attn\.conv_proj_q\.conv\.weight$'),
    dict,
    "this project's layout (CvT().state_dict())"))



# --------------------------------------------------------------------------------------------
# CMT layouts (official huawei-noah cmt_pytorch, ours)
# --------------------------------------------------------------------------------------------
# Official (stage letters a-d)          -> ours (stage index 0-3)
#   stem_conv{n} / stem_norm{n}          -> stem.{n-1}.conv / stem.{n-1}.bn
#   patch_embed_{l}.proj / .norm         -> stages.{i}.patch_embed.proj / .norm
#   relative_pos_{l}                     -> stages.{i}.relative_pos
#   blocks_{l}.{j}.proj (LPU)            -> stages.{i}.blocks.{j}.lpu
#   blocks_{l}.{j}.attn.sr.0 / .sr.1     -> stages.{i}.blocks.{j}.attn.sr.conv / .sr.bn
#   blocks_{l}.{j}.mlp.conv1.0 / .2      -> stages.{i}.blocks.{j}.ffn.conv1.conv / .bn
#   blocks_{l}.{j}.mlp.proj / .proj_bn   -> stages.{i}.blocks.{j}.ffn.dwconv / .dwconv_bn
#   blocks_{l}.{j}.mlp.conv2.0 / .1      -> stages.{i}.blocks.{j}.ffn.conv2.conv / .bn
#   blocks_{l}.{j}.{norm1,norm2,attn.*}  -> stages.{i}.blocks.{j}.{same}
#   _fc / _bn / head                     -> cls_proj.conv / cls_proj.bn / head
# Ours only: out_norms.{i} (optional norms for dense heads).
_CMT_STAGE_LETTERS = 'abcd'
_CMT_BLOCK = r'^blocks_([a-d])\.(\d+)\.'


def _cmt_stage(sub: str):
    """``re.sub`` replacement: stage letter (group 1) -> ``stages.{i}.`` + ``sub`` formatted
    with the match groups (``{1}`` = block index)."""
    return lambda m: f'stages.{_CMT_STAGE_LETTERS.index(m.group(1))}.' + sub.format(*m.groups())


_CMT_RULES = [(_CMT_BLOCK + old, _cmt_stage('blocks.{1}.' + new)) for old, new in (
    (r'proj\.', 'lpu.'),
    (r'attn\.sr\.0\.', 'attn.sr.conv.'),
    (r'attn\.sr\.1\.', 'attn.sr.bn.'),
    (r'mlp\.conv1\.0\.', 'ffn.conv1.conv.'),
    (r'mlp\.conv1\.2\.', 'ffn.conv1.bn.'),
    (r'mlp\.proj\.', 'ffn.dwconv.'),
    (r'mlp\.proj_bn\.', 'ffn.dwconv_bn.'),
    (r'mlp\.conv2\.0\.', 'ffn.conv2.conv.'),
    (r'mlp\.conv2\.1\.', 'ffn.conv2.bn.'),
    ('', ''),  # norm1, norm2, attn.{q,k,v,proj}: same names
)] + [
    (r'^stem_conv(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.conv.'),
    (r'^stem_norm(\d)\.', lambda m: f'stem.{int(m.group(1)) - 1}.bn.'),
    (r'^patch_embed_([a-d])\.', _cmt_stage('patch_embed.')),
    (r'^relative_pos_([a-d])$', _cmt_stage('relative_pos')),
    (r'^_fc\.', 'cls_proj.conv.'),
    (r'^_bn\.', 'cls_proj.bn.'),
]


register_format(WeightFormat(
    'cmt-official', 'cmt', _has_key_matching(r'relative_pos_a$'),
    lambda sd: regex_rename(sd, _CMT_RULES),
    'huawei-noah/Efficient-AI-Backbones cmt_pytorch (a plain state dict or {"model": ...})'))
register_format(WeightFormat(
    'cmt-ours', 'cmt', _has_key_matching(r'stages\.0\.relative_pos$'), dict,
    "this project's layout (CMT().state_dict())"))
