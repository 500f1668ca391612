r"""Checkpoint layouts, recognised by their keys: the registry each backbone family adds its
layouts to (CvT's and CMT's rules live in the backbones' files, ``cvt_mm/models/cvt.py`` and
``cmt.py``), and the unwrapping of MMEngine/DDP containers around a backbone's weights.

Example: an MMEngine checkpoint of a detector whose backbone has the official CvT keys
(``stage0.`` where ours say ``stages.0.``)::

    >>> import re
    >>> from cvt_mm.checkpoint import convert_state_dict, extract_state_dict
    >>> from cvt_mm.models import CvTModel
    >>> ours = CvTModel('13', num_classes=0).state_dict()
    >>> official = {re.sub(r'^stages\.(\d+)\.', r'stage\1.', k): v for k, v in ours.items()}
    >>> ckpt = {'meta': {}, 'state_dict': {**{'backbone.' + k: v for k, v in official.items()},
    ...                                    'neck.conv.weight': torch.zeros(1)}}
    >>> sd, dropped = extract_state_dict(ckpt)
    >>> converted, layout = convert_state_dict(sd, 'cvt')
    >>> layout, dropped, sorted(converted) == sorted(ours)
    ('cvt-official', 1, True)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch

from .io import CheckpointError

__all__ = ['StateDict', 'WeightFormat', 'register_format', 'known_formats', 'has_key_matching',
           'regex_rename', 'extract_state_dict', 'detect_format', 'convert_state_dict',
           'format_family']

StateDict = Dict[str, torch.Tensor]

# Containers under which checkpoints keep their weights, outermost first.
_CONTAINER_KEYS = ('state_dict', 'model', 'module', 'model_state')
# Prefixes that wrappers add in front of the backbone's own keys.
_WRAPPER_PREFIXES = ('module.', 'backbone.')


@dataclass(frozen=True)
class WeightFormat:
    """One on-disk layout of one backbone family, as :func:`register_format` records it.

    Attributes:
        name (str): the layout's name, e.g. ``'cvt-official'``, ``'cmt-ours'``.
        family (str): the backbone family, ``'cvt'`` or ``'cmt'``.
        matches (Callable[[set], bool]): recognises the layout from a state dict's set of keys
            (:func:`has_key_matching` makes one).
        to_ours (Callable[[dict], dict]): renames (and if needed reshapes) such a state dict
            into this project's layout (:func:`regex_rename` helps).
        description (str): where such files come from. Default ``''``.
    """
    name: str
    family: str
    matches: Callable[[set], bool]
    to_ours: Callable[[StateDict], StateDict]
    description: str = ''


_FORMATS: List[WeightFormat] = []


def register_format(fmt: WeightFormat) -> WeightFormat:
    """Add a layout to those :func:`detect_format` recognises, after the ones before it (the
    first that matches wins). The families register theirs when ``cvt_mm.models`` is imported.

    Args:
        fmt (WeightFormat): the layout.

    Returns:
        WeightFormat: ``fmt``.
    """
    _FORMATS.append(fmt)
    return fmt


def known_formats(family: Optional[str] = None) -> List[WeightFormat]:
    """The registered layouts, in the order they are tried.

    Args:
        family (str, optional): only this family's (``'cvt'``, ``'cmt'``). Default None: all.

    Returns:
        list[WeightFormat]: the layouts.

    Example::

        >>> import cvt_mm.models  # registers the families' layouts
        >>> [f.name for f in known_formats('cmt')]
        ['cmt-official', 'cmt-ours']
    """
    return [f for f in _FORMATS if family is None or f.family == family]


def has_key_matching(pattern: str) -> Callable[[set], bool]:
    """A ``WeightFormat.matches`` test: does any key match ``pattern`` (``re.match``)."""
    regex = re.compile(pattern)
    return lambda keys: any(regex.match(k) for k in keys)


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


def extract_state_dict(ckpt: dict, prefix: Optional[str] = None) -> Tuple[StateDict, int]:
    """Unwrap containers and wrapper prefixes: a backbone's tensors out of an MMEngine, DDP or
    plain checkpoint (the module's example shows one).

    Args:
        ckpt (dict): the loaded checkpoint. Its weights are looked for under ``state_dict``,
            ``model``, ``module``, ``model_state`` or at the top level.
        prefix (str, optional): keep the keys under this prefix only and strip it (as
            MMEngine's ``Pretrained`` init's ``prefix``, e.g. ``'backbone.'``). Default None:
            ``module.`` and ``backbone.`` are stripped when present.

    Returns:
        tuple[dict, int]: the tensors by key, and how many keys were dropped because they
        belong to other parts of a wrapping model (neck, heads, ...).

    Raises:
        CheckpointError: ``ckpt`` is no dict, holds no tensors, or no key starts with
            ``prefix``.
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
    """The layout of a state dict, recognised by its keys.

    Args:
        sd (dict): the tensors by key (after :func:`extract_state_dict`).
        family (str, optional): look among this family's layouts only (``'cvt'``,
            ``'cmt'``). Default None: every family's.

    Returns:
        WeightFormat: the first registered layout that matches.

    Raises:
        CheckpointError: no layout matches (naming the known ones and the first keys), or
            the keys are another family's (naming it).

    Example::

        >>> from cvt_mm.models import CMTModel
        >>> detect_format(CMTModel('ti').state_dict()).name
        'cmt-ours'
        >>> detect_format(CMTModel('ti').state_dict(), 'cvt')
        Traceback (most recent call last):
        ...
        cvt_mm.checkpoint.io.CheckpointError: the checkpoint is a cmt checkpoint ...not a cvt one...
    """
    keys = set(sd)
    candidates = known_formats(family)
    for fmt in candidates:
        if fmt.matches(keys):
            return fmt
    other = next((f for f in known_formats() if f.family != family and f.matches(keys)), None)
    if family and other:
        raise CheckpointError(
            f'the checkpoint is a {other.family} checkpoint (layout {other.name}), not a '
            f'{family} one: a {family} model loads {", ".join(f.name for f in candidates)}.')
    what = f'a {family}' if family else 'a ' + ' or '.join(sorted({f.family for f in candidates}))
    raise CheckpointError(
        f'cannot recognise the checkpoint as {what} model; known layouts: '
        f'{", ".join(f.name for f in candidates)}. First keys: {sorted(keys)[:8]}')


def convert_state_dict(sd: StateDict, family: Optional[str] = None) -> Tuple[StateDict, str]:
    """A state dict of any known layout renamed into ours.

    Args:
        sd (dict): the tensors by key (after :func:`extract_state_dict`).
        family (str, optional): ``'cvt'`` or ``'cmt'``. Default None: any family.

    Returns:
        tuple[dict, str]: the state dict in our layout, and the name of the layout it had.

    Raises:
        CheckpointError: as :func:`detect_format`.
    """
    fmt = detect_format(sd, family)
    return fmt.to_ours(sd), fmt.name


def format_family(name: str) -> str:
    """The family (``'cvt'``, ``'cmt'``) of the registered layout called ``name``."""
    return next(f.family for f in _FORMATS if f.name == name)
