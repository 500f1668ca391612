"""docs/timm_huggingface.md runs as written: each python block is a user's script, run by a
Python process of its own in a folder outside the checkout, and the page's export command runs
too. The official weights the page downloads come from caches prepared as the downloads would
leave them (no internet here): CMT-S's release file in the torch hub cache, Hugging Face's
``microsoft/cvt-13`` repository in the Hub's cache (offline mode), both random weights in the
published layouts. What this does not cover: the downloads themselves
(``tests/test_checkpoint/test_hub.py`` serves ours over HTTP; timm's and the Hub's are theirs).
The weights each script's model ends up with are checked to be the cached ones."""
import os
import os.path as osp
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CvtConfig

from cvt_mm.models import CMTModel, CvTModel

from helpers import ROOT
from layouts import cmt_to_official, cvt_to_huggingface

# End-to-end runs of the page's scripts: left out by `make test-fast`.
pytestmark = pytest.mark.slow

PAGE = osp.join(ROOT, 'docs', 'timm_huggingface.md')
CMT_URL = 'https://github.com/ggjy/CMT.pytorch/releases/download/release-v1/cmt_small.pth'


def page_blocks(kind: str) -> list:
    return re.findall(rf'```{kind}\n(.*?)```', open(PAGE).read(), re.S)


@pytest.fixture(scope='module')
def user(tmp_path_factory):
    """A user's folder with an image, and the caches the page's downloads read from."""
    root = tmp_path_factory.mktemp('user')
    assert not str(root).startswith(ROOT)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(root / 'image.jpg')
    torch.manual_seed(0)
    cmt = CMTModel('s')
    checkpoints = root / 'torch_home' / 'hub' / 'checkpoints'
    checkpoints.mkdir(parents=True)
    torch.save({'model': cmt_to_official(cmt.state_dict())}, checkpoints / 'cmt_small.pth')
    cvt = CvTModel('13')
    snapshot = root / 'hf_home' / 'hub' / 'models--microsoft--cvt-13' / 'snapshots' / 'c0ffee'
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / 'refs').mkdir()
    (snapshot.parent.parent / 'refs' / 'main').write_text('c0ffee')
    CvtConfig().save_pretrained(snapshot)  # transformers' CvT defaults are CvT-13's
    torch.save(cvt_to_huggingface(cvt.state_dict()), snapshot / 'pytorch_model.bin')
    env = dict(os.environ, TORCH_HOME=str(root / 'torch_home'), HF_HOME=str(root / 'hf_home'),
               HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1')
    return dict(root=root, env=env, cmt=cmt.state_dict(), cvt=cvt.state_dict())


def run(code: str, user: dict, *args) -> str:
    proc = subprocess.run([sys.executable, *(['-c', code] if code else []), *args],
                          cwd=user['root'], env=user['env'], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f'{code or args}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}'
    return proc.stdout


# What each python block prints, in the page's order.
EXPECTED = [
    r'tensor\(\[\[( *\d+,){4} *\d+\]\]\)',                             # timm top-5
    r'\[128, 256, 512\] \[8, 16, 32\]',                                  # timm features
    r'\[\(1, 64, 56, 56\), \(1, 192, 28, 28\), \(1, 384, 14, 14\)\] \[64, 192, 384\]',
    r'torch.Size\(\[1, 150, 256, 256\]\)',                               # UperNet
    r"\[\{'label': '[^']+', 'score': [0-9.e-]+\}(, \{'label'[^}]+\}){2}\]",  # Hub pipeline
    r'torch.Size\(\[1, 2, 256, 256\]\)',                                 # smp
]


def test_the_page_s_scripts_run_as_written(user):
    blocks = page_blocks('python')
    assert len(blocks) == len(EXPECTED)
    commands = [b for b in page_blocks('bash') if 'export_pretrained.py https://' in b]
    assert len(commands) == 1
    words = commands[0].split()
    run('', user, osp.join(ROOT, words[1]), *words[2:])  # python tools/misc/... URL OUT
    assert (user['root'] / 'exported' / 'cmt_s' / 'model.safetensors').is_file()
    for block, expected in zip(blocks, EXPECTED):
        out = run(block, user)
        assert re.search(expected, out), (block, out)


def test_the_page_s_models_carry_the_cached_official_weights(user):
    """What the scripts build, built again in the same environment: their weights are the
    cached files', not a random initialisation."""
    out = run(textwrap.dedent('''
        import cvt_mm, timm, torch
        import segmentation_models_pytorch as smp
        from cvt_mm.models.huggingface import CMTBackbone, CvTBackbone
        models = dict(
            timm_cvt=timm.create_model('cvt_13', pretrained=True),
            timm_cmt=timm.create_model('cmt_s', pretrained=True, features_only=True).model,
            hf_cvt=CvTBackbone.from_pretrained('microsoft/cvt-13').model,
            hf_cmt=CMTBackbone.from_pretrained('exported/cmt_s').model,
            smp_cmt=smp.Unet('tu-cmt_s.in1k', encoder_weights=True, classes=2).encoder.model.model)
        for name, model in models.items():
            torch.save(model.state_dict(), name + '.pth')
        print('saved')
    '''), user)
    assert 'saved' in out
    for name in ('timm_cvt', 'timm_cmt', 'hf_cvt', 'hf_cmt', 'smp_cmt'):
        source = user['cvt'] if 'cvt' in name else user['cmt']
        loaded = torch.load(user['root'] / f'{name}.pth', weights_only=True)
        shared = [k for k in loaded if k in source and not k.endswith('num_batches_tracked')]
        assert len(shared) > 100, name
        assert all(torch.equal(loaded[k], source[k]) for k in shared), name
