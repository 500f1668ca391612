"""Checkpoint layouts, recognised by their keys: the registry each backbone family adds its
layouts to (CvT's and CMT's rules live in the backbones' files, ``cvt_mm/models/cvt.py`` and
``cmt.py``), and the unwrapping of MMEngine/DDP containers around a backbone's weights.

Example::

    >>> sd, dropped = extract_state_dict(read_checkpoint('cmt_small.pth'))
    >>> ours, layout = convert_state_dict(sd, 'cmt')
    >>> layout
    'cmt-official'
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


def known_formats(family: Optional[str] = None) -> List[WeightFormat]:
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
    """Rename any known layout of ``family`` (any family when ``None``) into ours; returns
    (state_dict, format name)."""
    fmt = detect_format(sd, family)
    return fmt.to_ours(sd), fmt.name


def format_family(name: str) -> str:
    return next(f.family for f in _FORMATS if f.name == name)
