"""Run transformers' own backbone tests (``BackboneTesterMixin``, which every backbone that
transformers ships passes) on CvTBackbone and CMTBackbone.

    python .dev_scripts/run_transformers_backbone_suite.py FILE [pytest args]

FILE is transformers' ``tests/test_backbone_common.py``; it is not in transformers' wheel, so
it is read from a copy of the repository (the suite is run, not kept here). This script writes,
into a temporary folder beside that copy, the test case transformers' model test files write for
a backbone (a model tester with a small config and an input batch), and runs pytest on it. The
stored copy imports ``BackboneType`` from where transformers 4 kept it; transformers 5 moved it to
``transformers.backbone_utils``, so the conftest here makes it importable from the old places.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

CONFTEST = '''
import transformers.modeling_utils
import transformers.utils
from transformers.backbone_utils import BackboneType

# transformers 5 moved BackboneType; the suite's copy imports it from where it was.
transformers.modeling_utils.BackboneType = BackboneType
transformers.utils.BackboneType = BackboneType
'''

TEST_CASES = '''
import unittest

import torch

import cvt_mm  # noqa: F401  (registers the classes)
from cvt_mm.models.huggingface import CMTBackbone, CMTConfig, CvTBackbone, CvTConfig
from test_backbone_common import BackboneTesterMixin


class ModelTester:
    """What transformers' model testers give the mixin: a small config whose backbone returns
    several stages, and an input batch."""

    def __init__(self, config_class, arch, out_features):
        self.config_class, self.arch, self.out_features = config_class, arch, out_features

    def prepare_config_and_inputs_for_common(self):
        config = self.config_class(**self.arch, out_features=self.out_features)
        pixel_values = torch.randn(2, config.num_channels, 64, 64)
        return config, {'pixel_values': pixel_values}


class CvTBackboneTest(BackboneTesterMixin, unittest.TestCase):
    all_model_classes = (CvTBackbone, )
    config_class = CvTConfig
    has_attentions = False
    model_tester = ModelTester(CvTConfig, dict(embed_dims=[16, 32, 48], num_heads=[1, 2, 3],
                                               depths=[1, 1, 2]), ['stem', 'stage1', 'stage3'])


class CMTBackboneTest(BackboneTesterMixin, unittest.TestCase):
    all_model_classes = (CMTBackbone, )
    config_class = CMTConfig
    has_attentions = False
    model_tester = ModelTester(CMTConfig, dict(embed_dims=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                               stem_channels=8, fc_channels=32,
                                               pretrain_img_size=64),
                               ['stem', 'stage2', 'stage4'])
'''


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('file', help="transformers' tests/test_backbone_common.py")
    parser.add_argument('pytest_args', nargs=argparse.REMAINDER, help='passed on to pytest')
    args = parser.parse_args(argv)
    if not os.path.isfile(args.file):
        parser.error(f'{args.file} is not a file')
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix='transformers_backbone_suite_') as tmp:
        shutil.copy(args.file, os.path.join(tmp, 'test_backbone_common.py'))
        with open(os.path.join(tmp, 'conftest.py'), 'w') as f:
            f.write(CONFTEST)
        with open(os.path.join(tmp, 'test_cvt_mm_backbones.py'), 'w') as f:
            f.write(TEST_CASES)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [tmp, root, os.environ.get('PYTHONPATH', '')]))
        return subprocess.call([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider',
                                '--rootdir', tmp, '-c', os.devnull, tmp, *args.pytest_args],
                               cwd=tmp, env=env)


if __name__ == '__main__':
    sys.exit(main())
