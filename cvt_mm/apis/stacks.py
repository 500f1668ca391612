"""The combinations of packages that cannot work (:func:`problems`), for any environment or
requirements file: ``python -m cvt_mm.apis.collect_env`` applies them to the environment at
hand, and the repository's set-up (``tools/misc/check_stack.py``, with the tested stacks of
``tools/misc/stacks.py``) to a stack's requirements before its long build. Standard library
only: the set-up runs it before anything is installed (it loads this file by path).

Example::

    >>> problems(parse_requirements(['torch===2.1.2', 'numpy>=2']), python=(3, 11))
    ['torch 2.1.2 was compiled against NumPy 1 and cannot run with NumPy 2: ...']
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ['parse_requirements', 'installed_as_spec', 'problems']

Version = Tuple[int, ...]
Spec = List[Tuple[str, Version]]  # e.g. [('>=', (77,)), ('<', (81,))]; [] = any version


def _version(text: str) -> Version:
    parts = []
    for piece in text.split('+')[0].split('.'):
        digits = re.match(r'\d+', piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def _name(text: str) -> str:
    return re.sub(r'[-_.]+', '-', text).lower()


def parse_requirements(lines: Iterable[str]) -> Dict[str, Spec]:
    """``name -> spec`` of requirement lines (``torch===2.1.2``, ``numpy<2``, ``six``);
    comments, options and markers are left out."""
    found: Dict[str, Spec] = {}
    for line in lines:
        line = line.split('#')[0].split(';')[0].strip()
        match = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$', line)
        if not line or line.startswith('-') or not match:
            continue
        spec = [(op, _version(v)) for op, v in
                re.findall(r'(===|==|~=|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+*]*)', match.group(2))]
        found.setdefault(_name(match.group(1)), []).extend(spec)
    return found


def installed_as_spec(versions: Dict[str, str]) -> Dict[str, Spec]:
    """``name -> spec`` of installed distributions (``{'torch': '2.1.2+cu121'}``)."""
    return {_name(k): [('==', _version(v))] for k, v in versions.items()}


def _exact(spec: Spec) -> Optional[Version]:
    return next((v for op, v in spec if op in ('==', '===')), None)


def _below(spec: Optional[Spec], bound: Version) -> bool:
    """Whether every version ``spec`` allows is below ``bound``."""
    if spec is None:
        return False
    for op, v in spec:
        if op in ('==', '===') and v < bound:
            return True
        if op == '<' and v <= bound:
            return True
        if op == '<=' and v < bound:
            return True
        if op == '~=' and v[:-1] < bound[:len(v) - 1]:
            return True
    return False


def _at_least(spec: Optional[Spec], bound: Version) -> bool:
    """Whether every version ``spec`` allows is at least ``bound``."""
    if spec is None:
        return False
    return any((op in ('==', '===', '>=', '~=') and v >= bound) or (op == '>' and v >= bound)
               for op, v in spec)


def _text(v: Version) -> str:
    return '.'.join(map(str, v))


_OPENMMLAB = {'mmengine': 'onedl-mmengine', 'mmcv': 'onedl-mmcv', 'mmdet': 'onedl-mmdetection',
              'mmsegmentation': 'onedl-mmsegmentation', 'mmpretrain': 'onedl-mmpretrain'}


def problems(pins: Dict[str, Spec], python: Sequence[int]) -> List[str]:
    """What cannot work together in ``pins`` (from :func:`parse_requirements` or
    :func:`installed_as_spec`) on Python ``python``, each naming what is allowed; empty when
    nothing is known to be wrong."""
    found = []
    python = tuple(python)[:2]
    torch = pins.get('torch')
    torch_v = _exact(torch) if torch else None
    if torch_v and torch_v[:2] < (2, 3):
        if not _below(pins.get('numpy'), (2, )):
            found.append(f'torch {_text(torch_v)} was compiled against NumPy 1 and cannot run '
                         'with NumPy 2: pin numpy<2 (torch >= 2.3 runs with either)')
        if 'opencv-python' in pins and not _below(pins['opencv-python'], (4, 12)):
            found.append('opencv-python >= 4.12 needs NumPy 2, which torch '
                         f'{_text(torch_v)} cannot run with: pin opencv-python<4.12')
    if torch_v and torch_v[:2] <= (2, 1) and python >= (3, 12):
        found.append(f'torch {_text(torch_v)} has no wheel for Python {_text(python)}: use '
                     'Python 3.10 or 3.11 (stack "prebuilt")')
    vision = _exact(pins.get('torchvision', []))
    if torch_v and vision and len(torch_v) > 1 and len(vision) > 1 \
            and torch_v[0] == 2 and vision[:2] != (0, torch_v[1] + 15):
        found.append(f'torchvision {_text(vision)} does not pair with torch {_text(torch_v)}: '
                     f'torch 2.{torch_v[1]} pairs with torchvision 0.{torch_v[1] + 15}')
    if 'transformers' in pins and _at_least(pins['transformers'], (5, )) and torch_v \
            and torch_v[:2] < (2, 6):
        found.append(f'transformers 5 needs torch >= 2.6, not {_text(torch_v)}: leave '
                     'transformers out (cvt_mm then has no Hugging Face classes) or use the '
                     '"pinned" or "fork" stack')
    upstream = sorted(n for n in _OPENMMLAB if n in pins)
    forks = sorted(f for f in _OPENMMLAB.values() if f in pins)
    if upstream and forks:
        found.append(f'OpenMMLab packages ({", ".join(upstream)}) mixed with OneDL forks '
                     f'({", ".join(forks)}): they share import names (mmengine, mmcv, mmdet, '
                     'mmseg, mmpretrain), so all five switch together: either upstream (mmcv '
                     '2.1.0, mmdet 3.3, mmsegmentation 1.2, mmpretrain 1.2, mmengine 0.10.7) or '
                     'all onedl-*')
    upstream_heads = [n for n in ('mmdet', 'mmsegmentation') if n in pins
                      and not _at_least(pins[n], (3, 4) if n == 'mmdet' else (1, 3))]
    mmcv = pins.get('mmcv')
    if upstream_heads and mmcv is not None and not _below(mmcv, (2, 2)):
        found.append(f'{" and ".join(upstream_heads)} (upstream) assert mmcv < 2.2.0: pin '
                     'mmcv==2.1.0 (stacks "prebuilt", "pinned"), or move all five packages to '
                     'the OneDL forks (onedl-mmcv 2.3 with onedl-mmdetection 3.5, stack "fork")')
    if 'onedl-mmsegmentation' in pins and _below(pins.get('numpy'), (2, )):
        found.append('onedl-mmsegmentation requires numpy > 2: drop the numpy<2 pin (and use '
                     'a torch >= 2.3)')
    return found
