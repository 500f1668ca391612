"""The package works installed from its wheel, with no checkout beside it: the wheel built from
this tree, installed into a fresh virtual environment that sees the pinned stack's packages
(a ``.pth`` file naming this environment's site-packages, whose own ``.pth`` files, the
editable install of cvt_mm among them, are then not read), and run from a folder that is not
the checkout: ``python -m cvt_mm.apis.collect_env`` reports no problem and every part, and a
registered backbone builds and runs through MMEngine's registry."""
import os
import os.path as osp
import site
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow

RUN = textwrap.dedent('''
    import sys
    import cvt_mm, torch
    from mmengine.registry import MODELS
    assert cvt_mm.__file__.startswith(sys.prefix), cvt_mm.__file__
    model = MODELS.build(dict(type='CMT', arch='ti', out_indices=(0, 1, 2, 3))).eval()
    with torch.no_grad():
        print('SHAPES', [tuple(m.shape) for m in model(torch.zeros(1, 3, 64, 64))])
''')


def test_the_wheel_installed_elsewhere_collects_its_environment_and_builds_a_backbone(tmp_path):
    wheels = tmp_path / 'wheels'
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
                    '-q', '-w', str(wheels), ROOT], check=True, timeout=600, cwd=tmp_path)
    (wheel, ) = wheels.glob('cvt_mm-*.whl')
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)], check=True,
                   timeout=300)
    python = str(venv / 'bin' / 'python')
    target = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()'
                             '["purelib"])'], capture_output=True, text=True, check=True)
    purelib = target.stdout.strip()
    with open(osp.join(purelib, 'pinned_stack.pth'), 'w') as f:
        f.write('\n'.join(site.getsitepackages()) + '\n')
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '-q', '--target',
                    purelib, str(wheel)], check=True, timeout=600)
    away = tmp_path / 'elsewhere'
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    report = subprocess.run([python, '-m', 'cvt_mm.apis.collect_env'], capture_output=True,
                            text=True, cwd=away, env=env, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    lines = report.stdout.rstrip().splitlines()
    assert lines[-1].split() == ['problems', 'none'], report.stdout
    parts = [line for line in lines if line.startswith('  ') and 'cvt_mm' not in line]
    assert any(line.split()[-1] == 'yes' and 'MMEngine backbones' in line for line in parts)
    built = subprocess.run([python, '-c', RUN], capture_output=True, text=True, cwd=away,
                           env=env, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "SHAPES [(1, 46, 16, 16), (1, 92, 8, 8), (1, 184, 4, 4), (1, 368, 2, 2)]" \
        in built.stdout
