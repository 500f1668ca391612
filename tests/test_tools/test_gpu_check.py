"""`make gpu-check`: pytest runs the tests marked `gpu`, tools/analysis_tools/gpu_check.py turns
its JUnit XML into one table and a JSON report. Here: the summary of a real pytest run with a
pass, a failure, an error and skips; the CPU rehearsal a user without CUDA gets (every check
that a CPU can run passes, the others skip with `no CUDA`, exit status 0); and the offline
GPU node's wheelhouse and setup."""
import json
import math
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, load_tool

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

gpu_check = load_tool('analysis_tools/gpu_check')

TINY_TESTS = '''
import json
import pytest


@pytest.mark.gpu
@pytest.mark.parametrize('size', [8])
def test_passes(size, record_property):
    record_property('result', json.dumps(f'{size} fine'))
    record_property('median_s', json.dumps(0.25))


@pytest.mark.gpu
def test_fails(record_property):
    record_property('result', json.dumps('error 0.5 (tol 0.1)'))
    assert 0.5 <= 0.1, 'above the tolerance'


@pytest.fixture
def broken():
    raise RuntimeError('no device')


@pytest.mark.gpu
def test_errors(broken):
    pass


@pytest.mark.gpu
@pytest.mark.skipif(True, reason='no CUDA: the real one needs a GPU')
def test_skipped():
    pass


@pytest.mark.gpu
def test_skips_inside():
    pytest.skip('no CUDA: decided in the test')


def test_not_a_gpu_check():
    assert False, 'not selected by -m gpu'
'''


def make_gpu_check(out, **variables) -> subprocess.CompletedProcess:
    args = [f'{k}={v}' for k, v in dict(GPU_CHECK_OUT=out, **variables).items()]
    return subprocess.run(['make', '--no-print-directory', 'gpu-check', *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, TMPDIR=str(osp.dirname(out))))


def test_summary_of_a_real_pytest_run(tmp_path):
    """`make gpu-check` on a file of tiny tests: one row each, with the recorded result and
    numbers, the skip reason, or the failure; exit status non-zero for the failure."""
    tests = tmp_path / 'test_tiny.py'
    tests.write_text(TINY_TESTS)
    out = tmp_path / 'report.json'
    proc = make_gpu_check(out, GPU_CHECK_TESTS=tests)
    assert proc.returncode != 0, proc.stdout[-3000:]
    report = json.loads(out.read_text())
    rows = {(r['check'], r['subject']): r for r in report['rows']}
    assert list(rows) == [('passes', '8'), ('fails', ''), ('errors', ''), ('skipped', ''),
                          ('skips_inside', '')]
    assert [r['status'] for r in rows.values()] == ['PASS', 'FAIL', 'FAIL', 'SKIP', 'SKIP']
    assert rows['passes', '8']['result'] == '8 fine'
    assert rows['passes', '8']['numbers'] == {'median_s': 0.25}
    assert rows['fails', '']['result'].startswith('error 0.5 (tol 0.1) / AssertionError: '
                                                  'above the tolerance')
    assert 'RuntimeError: no device' in rows['errors', '']['result']
    assert rows['skipped', '']['result'] == 'no CUDA: the real one needs a GPU'
    assert rows['skips_inside', '']['result'] == 'no CUDA: decided in the test'
    assert report['pytest_exit'] == 1 and report['setup_seconds'] is not None
    assert report['summary'].startswith('1 passed, 2 failed, 2 skipped; checks took ')
    stdout = proc.stdout
    table = stdout[stdout.index('| check '):stdout.index(report['summary'])]
    assert table.strip().count('\n') == 1 + 5  # under the heads: a rule, one line per test
    assert '| passes ' in table and '| 8 ' in table and 'not recorded' in stdout
    assert osp.isfile(tmp_path / 'report.xml')  # the JUnit XML beside the JSON


def test_pytest_that_did_not_finish_fails_the_summary(tmp_path, capsys):
    out = str(tmp_path / 'report.json')
    assert gpu_check.main([str(tmp_path / 'missing.xml'), '--out', out,
                           '--pytest-exit', '4']) == 1
    printed = capsys.readouterr().out
    assert 'missing.xml is missing' in printed and 'pytest exited with 4' in printed
    junit = tmp_path / 'none.xml'
    junit.write_text('<testsuites><testsuite name="pytest" tests="0" time="0.5"/></testsuites>')
    assert gpu_check.main([str(junit), '--out', out, '--pytest-exit', '5']) == 1
    assert 'pytest exited with 5 (no test selected)' in capsys.readouterr().out
    assert gpu_check.main([str(junit), '--out', out, '--pytest-exit', '0']) == 0


@pytest.fixture(scope='module')
def rehearsal(tmp_path_factory):
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA: `make gpu-check` runs the real checks here')
    out = tmp_path_factory.mktemp('gpu_check') / 'report.json'
    proc = make_gpu_check(out)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return proc.stdout, json.loads(out.read_text()), out.parent


def test_rehearsal_passes_and_skips_only_cuda_checks(rehearsal):
    stdout, report, folder = rehearsal
    rows = report['rows']
    assert report['summary'] in stdout and '| check ' in stdout
    assert 'device cpu: python ' in stdout and 'sizes: parity 2x3x64x96' in stdout
    assert {r['check'] for r in rows} == {'environment', 'mmcv_cuda_ops', 'mmcv_ops_cpu',
                                          'mmcv_ops_cuda_vs_cpu', 'parity', 'sdpa',
                                          'train_step', 'ddp', 'compile'}
    assert not [r for r in rows if r['status'] == gpu_check.FAIL]
    skipped = {(r['check'], r['subject']) for r in rows if r['status'] == gpu_check.SKIP}
    assert all(r['result'].startswith('no CUDA: ') for r in rows
               if r['status'] == gpu_check.SKIP)
    assert skipped == {('mmcv_cuda_ops', ''), ('mmcv_ops_cuda_vs_cpu', ''),
                       ('ddp', 'UperNet-CvT13')} | {
        ('sdpa', f'{b}-{m}-{p}') for b in ('CvT-13', 'CMT-S') for m in ('train', 'eval')
        for p in ('fp16', 'bf16')}
    assert report['pytest_exit'] == 0 and report['checks_seconds'] > 0
    assert report['setup_seconds'] is not None
    # The DDP run passed, so pytest removed its checkpoints with its temporary folder.
    assert list(folder.rglob('*.pth')) == []


def test_rehearsal_reports_the_numbers(rehearsal):
    report = rehearsal[1]
    assert report['environment']['device'] == 'cpu'
    numbers = {(r['check'], r['subject']): r['numbers'] for r in report['rows']}
    for precision in ('fp32', 'fp16', 'bf16'):
        parity = numbers['parity', f'CvT-13-{precision}']
        assert parity['out_rel_error'] <= parity['tolerance'][0]
    assert sum(n for stage in numbers['sdpa', 'CMT-S-eval-fp32']['kernels'].values()
               for n in stage.values()) == 25
    steps = [numbers['train_step', s] for s in ('MaskRCNN-CvT13', 'MaskRCNN-SwinT-mmdet')]
    assert all(s['median_s'] > 0 and all(map(math.isfinite, s['losses'])) for s in steps)
    ratio = report['ratios']['Mask R-CNN CvT-13 / Swin-T']
    assert ratio['time'] == pytest.approx(steps[0]['median_s'] / steps[1]['median_s'])
    assert numbers['ddp', 'MaskRCNN-CvT13']['iterations'] >= 3
    for subject in ('CvT-13-train', 'CMT-S-infer'):
        compiled = numbers['compile', subject]
        assert compiled['ratio'] == pytest.approx(compiled['eager_s'] / compiled['compiled_s'])
        assert compiled['out_rel_error'] <= 1e-4


def _index_reachable() -> bool:
    import urllib.request
    try:
        urllib.request.urlopen('https://pypi.org/simple/mmcv/', timeout=10).close()
        return True
    except OSError:
        return False


def test_make_wheelhouse_fits_what_a_gpu_node_can_receive(tmp_path):
    """`make wheelhouse` (what an offline GPU node installs from): every listed package for
    Python 3.12, pytest among them, the mmcv source archive, under 60 MB."""
    if not _index_reachable():
        pytest.skip('PyPI is not reachable from here: make wheelhouse needs the package index')
    out = tmp_path / 'wheelhouse'
    proc = subprocess.run(['make', '--no-print-directory', 'wheelhouse', 'PYVER=3.12',
                           f'WHEELHOUSE={out}'], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    with open(osp.join(ROOT, 'tools', 'misc', 'gpu_node_requirements.txt')) as f:
        wanted = [line.split('#')[0].strip() for line in f]
    for requirement in filter(None, wanted):
        name, version = requirement.split('==')
        stem = f'{name.replace("-", "_")}-{version}-'.lower()
        assert any(f.lower().startswith(stem) for f in files), (requirement, files)
    assert 'mmcv-2.1.0.tar.gz' in files and any(f.startswith('pytest-') for f in files)
    assert not any(f.startswith(('torch-', 'numpy-', 'opencv')) for f in files)
    binary = [f for f in files if f.endswith('.whl') and '-none-any' not in f]
    assert binary and all('cp312' in f or 'abi3' in f for f in binary), binary
    size_mb = sum(p.stat().st_size for p in out.iterdir()) / 2 ** 20
    assert size_mb < 60 and f'{len(files)} files' in proc.stdout


def test_setup_gpu_node_says_what_it_needs(tmp_path):
    proc = subprocess.run(['bash', osp.join(ROOT, 'tools', 'misc', 'setup_gpu_node.sh'),
                           str(tmp_path / 'missing')], capture_output=True, text=True)
    assert proc.returncode == 2 and "made by 'make wheelhouse'" in proc.stderr


def test_the_suite_runs_without_xdist(tmp_path):
    """A GPU node's pytest may come without pytest-xdist: tests/conftest.py's xdist hook is
    optional, so the GPU checks still collect."""
    proc = subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:xdist', '-p',
                           'no:cacheprovider', '--co', '-q', '-m', 'gpu', 'tests/test_gpu'],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'tests/test_gpu/test_gpu_parity.py::test_parity[CvT-13-fp32]' in proc.stdout
    assert 'test_parity_errors_see_a_one_percent_error' not in proc.stdout  # not marked gpu
