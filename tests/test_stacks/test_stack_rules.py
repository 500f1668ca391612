"""The parts of the stacks' support that do not need a particular stack: the combinations the
set-up refuses before its long build, and the feature checks' errors, checked here on whatever
torch runs the suite (safe loading: test_safe_loading.py)."""
import os
import os.path as osp
import subprocess
import sys

import pytest

import cvt_mm  # noqa: F401  (allow-lists MMEngine's checkpoint types)
from cvt_mm import compat
from cvt_mm.apis.stacks import parse_requirements, problems

from helpers import ROOT, STACKS

pytestmark = pytest.mark.stack


@pytest.mark.parametrize('stack', sorted(STACKS))
def test_every_tested_stack_passes_its_own_rules(stack):
    with open(osp.join(ROOT, STACKS[stack].requirements)) as f:
        pins = parse_requirements(f)
    python = tuple(int(p) for p in STACKS[stack].python.split('.'))
    assert problems(pins, python) == []


BAD = {
    'numpy 2 with torch 2.1': (['torch===2.1.2', 'torchvision==0.16.2', 'numpy>=2'], 'numpy<2'),
    'no numpy pin with torch 2.1': (['torch==2.1.2'], 'numpy<2'),
    'opencv 4.12 with torch 2.1': (['torch==2.1.2', 'numpy<2', 'opencv-python==4.12.0.88'],
                                   'opencv-python<4.12'),
    'torch 2.1 on Python 3.12': (['torch==2.1.2', 'numpy<2'], 'Python 3.10 or 3.11'),
    'unpaired torchvision': (['torch==2.13.0', 'torchvision==0.27.0'], 'torchvision 0.28'),
    'transformers 5 with torch 2.1': (['torch==2.1.2', 'numpy<2', 'transformers==5.25.0'],
                                      'needs torch >= 2.6'),
    'upstream mmdet with mmcv 2.2': (['mmcv==2.2.0', 'mmdet==3.3.0'], 'mmcv==2.1.0'),
    'upstream mmseg with any mmcv': (['mmcv>=2', 'mmsegmentation==1.2.2'], 'mmcv==2.1.0'),
    'upstream mixed with a fork': (['mmcv==2.1.0', 'onedl-mmdetection==3.5.1'], 'all onedl-*'),
    'onedl-mmsegmentation with numpy 1': (['onedl-mmsegmentation==1.4.2', 'numpy<2'],
                                          'numpy > 2'),
}


@pytest.mark.parametrize('case', sorted(BAD))
def test_a_combination_that_cannot_work_is_refused_naming_what_is_allowed(case):
    lines, allowed = BAD[case]
    python = (3, 12) if 'Python 3.12' in case else (3, 11)
    found = problems(parse_requirements(lines), python)
    assert len(found) == 1 and allowed in found[0], found


def test_the_set_up_stops_before_building_on_a_bad_combination(tmp_path):
    """tools/misc/check_stack.py, which tools/misc/setup_env.sh runs first, on the standard
    library alone (no cvt_mm, no torch on its path): exit 2 and the reason."""
    bad = tmp_path / 'bad.txt'
    bad.write_text('torch===2.1.2\ntorchvision==0.16.2\nnumpy==2.2.6\nmmcv==2.1.0\n')
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    proc = subprocess.run([sys.executable, '-S', osp.join(ROOT, 'tools', 'misc', 'check_stack.py'),
                           '--requirements', str(bad)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and 'pin numpy<2' in proc.stderr, proc.stderr
    good = subprocess.run([sys.executable, '-S', osp.join(ROOT, 'tools', 'misc', 'check_stack.py'),
                           'prebuilt', '--shell'], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert good.returncode == 0 and 'VENV=.venv-prebuilt' in good.stdout, good.stderr


def test_selective_recomputation_says_which_torch_it_needs_where_it_is_missing():
    from cvt_mm.models import CMTModel
    if compat.HAS_SELECTIVE_CHECKPOINT:
        assert CMTModel('ti', num_classes=0, selective_cp=True).stages[0].selective_cp
    else:
        with pytest.raises(RuntimeError, match=r'selective_cp=True .*needs torch >= 2\.4'):
            CMTModel('ti', num_classes=0, selective_cp=True)


def _bounded_requirements():
    """pyproject's requirements with a lower and an upper bound: name -> (lower, upper)."""
    import re

    import tomllib
    with open(osp.join(ROOT, 'pyproject.toml'), 'rb') as f:
        project = tomllib.load(f)['project']
    lines = list(project['dependencies'])
    for extra in project['optional-dependencies'].values():
        lines += [r for r in extra if not r.startswith('cvt_mm')]
    bounds = {}
    for name, spec in parse_requirements(lines).items():
        lower = [v for op, v in spec if op == '>=']
        upper = [v for op, v in spec if op == '<']
        if lower and upper:
            bounds[re.sub(r'[-_.]+', '-', name)] = (lower[0], upper[0])
    return bounds


def test_the_package_s_bounds_are_the_tested_range():
    """Each bounded requirement of pyproject.toml runs from the lowest version a tested stack
    pins to below the minor after the newest (as its comment promises): no untested release
    is allowed, and none a stack tests is refused."""
    pinned, newer = {}, set()
    for stack_name, stack in STACKS.items():
        with open(osp.join(ROOT, stack.requirements)) as f:
            for name, spec in parse_requirements(f).items():
                exact = [v for op, v in spec if op in ('==', '===')]
                if exact:
                    pinned.setdefault(name, []).append(exact[0])
                    if stack_name != 'prebuilt':
                        newer.add(name)
    checked = []
    for name, (lower, upper) in _bounded_requirements().items():
        # What the newer stacks pin (a pin of the prebuilt stack alone, such as MMDeploy's
        # tensorboard, holds that old stack to a release, not the package's range).
        if name not in newer:
            continue
        tested = sorted(pinned[name])
        newest = tested[-1]
        want_upper = (newest[0], newest[1] + 1)
        pad = lambda v: tuple(v) + (0, ) * (3 - len(v))  # noqa: E731  (0.11 is 0.11.0)
        assert pad(lower) == pad(tested[0]), \
            f'{name}: lower bound {lower}, lowest tested {tested[0]}'
        assert tuple(upper[:2]) == want_upper and all(p == 0 for p in upper[2:]), \
            f'{name}: upper bound {upper}, newest tested {newest}: want <{want_upper}'
        checked.append(name)
    assert {'torch', 'transformers', 'timm', 'mmengine', 'mmcv'} <= set(checked), checked
