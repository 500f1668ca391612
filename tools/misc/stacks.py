"""The repository's tested stacks (docs/installation.md): each one's virtual environment,
Python, requirements file, the extras of cvt_mm it installs and the modules its set-up checks
import. Read by tools/misc/check_stack.py (and so tools/misc/setup_env.sh) and the stack
check's tests; standard library only, since nothing is installed when the set-up reads it.
Which package combinations cannot work is the package's own rule
(:func:`cvt_mm.apis.stacks.problems`), applied to each stack's requirements.

================  ======  =========================  =========================================
stack             Python  requirements               what it is
================  ======  =========================  =========================================
``prebuilt``      3.11    requirements/prebuilt.txt  OpenMMLab's last prebuilt stack: torch 2.1.2,
                                                     mmcv 2.1.0, numpy 1; no Hugging Face
``pinned``        3.11    requirements.txt           the demo's and the full suite's
``fork``          3.12    requirements/fork.txt      the OneDL forks, torch 2.14.1,
                                                     transformers 5.25
================  ======  =========================  =========================================
"""
from typing import Dict, NamedTuple, Tuple

__all__ = ['Stack', 'STACKS']


class Stack(NamedTuple):
    """One tested stack: its virtual environment, interpreter, requirements, the extras of
    cvt_mm it uses, and the modules its set-up checks import."""
    venv: str
    python: str
    requirements: str
    extras: Tuple[str, ...]
    imports: Tuple[str, ...]


_COMMON = ('torch', 'torchvision', 'mmcv.ops', 'mmdet', 'mmseg', 'mmpretrain', 'timm',
           'segmentation_models_pytorch', 'torchdata.stateful_dataloader', 'cvt_mm')
STACKS: Dict[str, Stack] = {
    'prebuilt': Stack('.venv-prebuilt', '3.11', 'requirements/prebuilt.txt',
                      ('det', 'seg', 'cls', 'timm', 'smp', 'tests', 'mmdeploy'),
                      _COMMON + ('mmdeploy.apis', 'onnxruntime')),
    'pinned': Stack('.venv', '3.11', 'requirements.txt',
                    ('det', 'seg', 'cls', 'timm', 'hf', 'smp', 'tests', 'deploy', 'docs'),
                    _COMMON + ('transformers', 'onnxruntime', 'onnxscript', 'sphinx')),
    'fork': Stack('.venv-fork', '3.12', 'requirements/fork.txt',
                  ('det-onedl', 'seg-onedl', 'cls-onedl', 'timm', 'hf', 'smp', 'tests', 'deploy'),
                  _COMMON + ('transformers', 'onnxruntime', 'onnxscript')),
}
