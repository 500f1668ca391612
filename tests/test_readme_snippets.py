"""Config snippets of the README and docs/ are real configs: each ```python block that starts
with `_base_ =` is written to a file and its model built (weights from random, so no download
is needed); the checkpoint it names is checked to be the one the README tells users to get."""
import glob
import os.path as osp
import re

import pytest
from mmengine.config import Config

import cvt_mm  # noqa: F401
from cvt_mm.testing import build_model_from_config

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DOCS = [osp.join(ROOT, 'README.md')] + sorted(glob.glob(osp.join(ROOT, 'docs', '*.md')))


def config_snippets():
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for i, block in enumerate(re.findall(r'```python\n(.*?)```', text, re.S)):
            if block.lstrip().startswith('_base_ ='):
                yield pytest.param(block, id=f'{osp.basename(path)}#{i}')


@pytest.mark.parametrize('snippet', list(config_snippets()))
def test_config_snippet_builds(snippet, tmp_path):
    # Paths in snippets are relative to the repository root, where users run the tools.
    text = re.sub(r"_base_ = '([^']+)'", lambda m: f"_base_ = {osp.join(ROOT, m.group(1))!r}",
                  snippet)
    path = tmp_path / 'snippet.py'
    path.write_text(text)
    cfg = Config.fromfile(str(path))
    init_cfg = cfg.model.backbone.get('init_cfg')
    if init_cfg:
        assert osp.basename(init_cfg['checkpoint']) in open(DOCS[0]).read()
    build_model_from_config(cfg)


def test_there_are_snippets_to_check():
    assert list(config_snippets())
