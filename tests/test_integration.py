"""cvt_mm.integration, change 1: MMPretrain 1.2.0 beside transformers 5 (what GPU images ship,
and what the suite's environment holds for the Hugging Face backbones): importing cvt_mm keeps
``mmpretrain.models`` and our classification configs working."""
import os.path as osp
import subprocess
import sys

import pytest

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_plain_mmpretrain_breaks_beside_transformers5():
    proc = run_python('import transformers, mmpretrain.models')
    assert proc.returncode != 0 and 'blip' in proc.stderr  # the multimodal models


def test_cvt_mm_keeps_the_classification_configs_working():
    code = '''
import transformers
assert transformers.__version__.startswith('5.'), transformers.__version__
import cvt_mm
from cvt_mm.apis.builders import build_model_from_config
model = build_model_from_config('configs/imagenet_cvt13_300e_in1k.py')
print(type(model).__name__, type(model.backbone).__name__)
'''
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'ImageClassifier CvT' in proc.stdout
