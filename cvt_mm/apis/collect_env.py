"""What this environment has, and which parts of cvt_mm work in it:
``python -m cvt_mm.apis.collect_env`` (as ``python -m mmdet.utils.collect_env``).

It prints the versions found (and which distribution provides each OpenMMLab import name:
upstream ``mmdet`` or the fork ``onedl-mmdetection``), the torch features cvt_mm asks for
(:mod:`cvt_mm.compat`), each part of cvt_mm with "yes" or the reason it is absent, and the
combinations known not to work (:func:`cvt_mm.apis.stacks.problems`). Exit status 1 when there is
such a problem.

Example::

    $ python -m cvt_mm.apis.collect_env
    Python              3.11.7
    torch               2.1.2+cu121
    ...
    Hugging Face        no: transformers is not installed: pip install "cvt_mm[hf]" ...
"""
from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Dict, List, Optional, Tuple

from .stacks import installed_as_spec, problems

__all__ = ['versions', 'parts', 'collect_env', 'main']

# Import name -> the distributions that provide it (upstream first).
DISTRIBUTIONS = {
    'torch': ('torch', ), 'torchvision': ('torchvision', ), 'numpy': ('numpy', ),
    'opencv': ('opencv-python', 'opencv-python-headless'),
    'mmengine': ('mmengine', 'onedl-mmengine'), 'mmcv': ('mmcv', 'onedl-mmcv', 'mmcv-lite'),
    'mmdet': ('mmdet', 'onedl-mmdetection'),
    'mmseg': ('mmsegmentation', 'onedl-mmsegmentation'),
    'mmpretrain': ('mmpretrain', 'onedl-mmpretrain'), 'torchdata': ('torchdata', ),
    'timm': ('timm', ), 'transformers': ('transformers', ),
    'segmentation_models_pytorch': ('segmentation-models-pytorch', ),
    'onnx': ('onnx', ), 'onnxscript': ('onnxscript', ), 'onnxruntime': ('onnxruntime', ),
    'setuptools': ('setuptools', ),
}


def versions() -> Dict[str, Tuple[str, str]]:
    """``import name -> (distribution, version)`` of what is installed."""
    found = {}
    for name, dists in DISTRIBUTIONS.items():
        for dist in dists:
            try:
                found[name] = (dist, metadata.version(dist))
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def _importable(module: str) -> Optional[str]:
    """``None`` if ``module`` imports, else why not (the exception, in one line)."""
    try:
        __import__(module)
    except Exception as err:  # noqa: BLE001 - reported, not raised
        return f'{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ""}'
    return None


def parts() -> List[Tuple[str, Optional[str]]]:
    """``(part of cvt_mm, None or why it does not work here)``, importing what each needs."""
    from .. import compat
    out = [('models (CvT, CMT)', _importable('cvt_mm.models'))]
    mm = _importable('mmengine') or _importable('mmcv')
    out.append(('MMEngine backbones', mm))
    ops = mm or _importable('mmcv.ops')
    for part, module in (('detection (MMDetection)', 'mmdet.models'),
                         ('segmentation (MMSegmentation)', 'mmseg.models'),
                         ('classification (MMPretrain)', 'mmpretrain.models')):
        out.append((part, ops or _importable(module)))
    out.append(('exact mid-epoch resume (torchdata)',
                _importable('torchdata.stateful_dataloader')))
    out.append(('timm models', _importable('timm')))
    hf = compat.huggingface_unavailable()
    out.append(('Hugging Face', hf))
    smp = _importable('segmentation_models_pytorch') or _importable('timm')
    out.append(('segmentation_models_pytorch encoders', smp))
    onnx = None if compat.has('onnx_dynamo_export') else \
        'needs torch >= 2.5 (torch.onnx.export(dynamo=True))'
    onnx = onnx or _importable('onnxscript') or _importable('onnxruntime')
    out.append(('ONNX export', onnx))
    out.append(('selective_cp=True', None if compat.has('selective_checkpoint') else
                'needs torch >= 2.4 (use with_cp=True)'))
    return out


def collect_env() -> Tuple[str, List[str]]:
    """The report's text, and the problems found."""
    from .. import compat
    rows = [('Python', platform.python_version()), ('platform', platform.platform())]
    found = versions()
    for name, (dist, version) in found.items():
        upstream = DISTRIBUTIONS[name][0]
        if name == 'torch':  # its build too (2.1.2+cu121)
            import torch
            version = torch.__version__
        rows.append((name, version if dist == upstream else f'{version} ({dist})'))
        if name == 'torch':
            rows.append(('  CUDA available', str(torch.cuda.is_available())))
    rows.append(('', ''))
    rows.append(('torch features', ''))
    for feature, (present, since) in compat.FEATURES.items():
        rows.append((f'  {feature}', 'yes' if present else f'no (torch >= {since})'))
    rows.append(('', ''))
    rows.append(('cvt_mm parts', ''))
    for part, why in parts():
        rows.append((f'  {part}', 'yes' if why is None else f'no: {why}'))
    found_problems = problems(installed_as_spec({d: v for d, v in found.values()}),
                              sys.version_info[:2])
    rows.append(('', ''))
    rows.append(('problems', 'none' if not found_problems else ''))
    text = '\n'.join(f'{k:<40}{v}'.rstrip() for k, v in rows)
    text += ''.join(f'\n  - {p}' for p in found_problems)
    return text, found_problems


def main() -> int:
    text, found = collect_env()
    print(text)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
