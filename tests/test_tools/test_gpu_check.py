"""`make gpu-check` as a user runs it on a machine without CUDA: a CPU rehearsal of every check
a CPU can run, the CUDA-only rows marked `skipped: no CUDA`, exit status 0; and the pieces
that decide pass or fail do fail when they should."""
import json
import math
import os
import os.path as osp
import subprocess

import pytest
import torch

from helpers import ROOT, load_tool

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

gpu_check = load_tool('analysis_tools/gpu_check')


@pytest.fixture(scope='module')
def rehearsal(tmp_path_factory):
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA: `make gpu-check` runs the real checks here')
    out = tmp_path_factory.mktemp('gpu_check') / 'report.json'
    temp = tmp_path_factory.mktemp('gpu_check_tmp')  # where its temporary DDP folder goes
    proc = subprocess.run(['make', '--no-print-directory', 'gpu-check', f'GPU_CHECK_OUT={out}'],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, TMPDIR=str(temp)))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    with open(out) as f:
        return proc.stdout, json.load(f), temp


def test_rehearsal_prints_the_table_and_skips_only_cuda_rows(rehearsal):
    stdout, report, temp = rehearsal
    rows = report['rows']
    assert '| check ' in stdout and report['summary'] in stdout
    assert {r['check'] for r in rows} == {'environment', 'mmcv build', 'mmcv ops', 'parity',
                                          'sdpa', 'train step', 'ddp'}
    skipped = {r['subject'] for r in rows if r['status'] == gpu_check.NO_CUDA}
    assert skipped == {'RoIAlign, NMS: CUDA vs CPU'} | {
        r['subject'] for r in rows
        if r['check'] == 'sdpa' and not r['subject'].endswith('fp32')}
    assert not any(r['status'] == gpu_check.FAIL for r in rows)
    assert report['setup_seconds'] is not None and report['checks_seconds'] > 0
    # The DDP runs passed, so their temporary folder (0.5 GB of checkpoints) is gone.
    assert list(temp.glob('gpu_check_*')) == []


def test_rehearsal_runs_every_cpu_check_for_real(rehearsal):
    rows = rehearsal[1]['rows']
    parity = [r for r in rows if r['check'] == 'parity']
    assert len(parity) == 6 and all(r['status'] == gpu_check.PASS for r in parity)
    for r in parity:
        tolerance = r['detail']['tolerance']
        assert r['detail']['out_rel_error'] <= tolerance[0]
        if r['subject'].split()[1] != 'fp32':  # autocast really ran in lower precision
            assert r['detail']['out_rel_error'] > 0
    sdpa = [r for r in rows if r['check'] == 'sdpa' and r['status'] != gpu_check.NO_CUDA]
    assert len(sdpa) == 4
    for r in sdpa:
        calls = sum(n for per_stage in r['detail']['kernels'].values()
                    for n in per_stage.values())
        assert calls == {'CvT-13': 13, 'CMT-S': 25}[r['subject'].split()[0]]  # one per block
        # The math fallback is only a warning on a CPU (a failure on CUDA).
        assert r['status'] == (gpu_check.WARN if 'math' in r['result'] else gpu_check.PASS)
    steps = {r['subject']: r for r in rows if r['check'] == 'train step'}
    for name in gpu_check.TRAIN_CONFIGS:
        assert steps[name]['status'] == gpu_check.PASS
        assert steps[name]['detail']['median_s'] > 0
        assert all(math.isfinite(v) for v in steps[name]['detail']['losses'])
    assert 'time_ratio' in steps['Mask R-CNN CvT-13 / Swin-T']['detail']
    ddp = [r for r in rows if r['check'] == 'ddp']
    # A GPU runs every DDP config; the rehearsal one (test_distributed.py runs the others).
    assert gpu_check.Plan.for_device('cuda').ddp_configs == tuple(gpu_check.DDP_CONFIGS)
    assert [r['subject'] for r in ddp] == ['Mask R-CNN CvT-13 (tools/dist_train.sh)']
    for r in ddp:
        assert r['status'] == gpu_check.PASS, r
        assert r['detail']['iterations'] >= 3 and r['detail']['checkpoints']


def test_a_failing_check_is_a_failed_row_and_the_others_still_run():
    report = gpu_check.Report()
    report.run('demo', 'raises', lambda: 1 / 0)
    report.run('demo', 'passes', lambda: (gpu_check.PASS, 'fine', {}))
    assert [r.status for r in report.rows] == [gpu_check.FAIL, gpu_check.PASS]
    assert 'ZeroDivisionError' in report.rows[0].result
    assert report.failed and 'raises' in report.table()


def test_parity_fails_on_a_wrong_result():
    plan = gpu_check.Plan.for_device('cpu')
    reference = gpu_check.parity_reference(plan, 'CvT-13')
    status, _, detail = gpu_check.check_parity(plan, 'CvT-13', reference, 'fp32')
    assert status == gpu_check.PASS and detail['out_rel_error'] == 0
    reference['outs'][0] = reference['outs'][0] * 1.01  # a 1 % error in one pyramid level
    status, result, detail = gpu_check.check_parity(plan, 'CvT-13', reference, 'fp32')
    assert status == gpu_check.FAIL and abs(detail['out_rel_error'] - 0.0099) < 1e-3, result


def test_device_cuda_without_cuda_is_a_usage_error(capsys):
    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    with pytest.raises(SystemExit) as err:
        gpu_check.parse_args(['--device', 'cuda'])
    assert err.value.code == 2 and 'torch sees no CUDA device' in capsys.readouterr().err


def _index_reachable() -> bool:
    import urllib.request
    try:
        urllib.request.urlopen('https://pypi.org/simple/mmcv/', timeout=10).close()
        return True
    except OSError:
        return False


def test_make_wheelhouse_fits_what_a_gpu_node_can_receive(tmp_path):
    """`make wheelhouse` (what an offline GPU node installs from): every listed package for
    Python 3.12, the mmcv source archive, under 60 MB."""
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
    assert 'mmcv-2.1.0.tar.gz' in files
    assert not any(f.startswith(('torch-', 'numpy-', 'opencv')) for f in files)
    binary = [f for f in files if f.endswith('.whl') and '-none-any' not in f]
    assert binary and all('cp312' in f or 'abi3' in f for f in binary), binary
    size_mb = sum(p.stat().st_size for p in out.iterdir()) / 2 ** 20
    assert size_mb < 60 and f'{len(files)} files' in proc.stdout


def test_setup_gpu_node_says_what_it_needs(tmp_path):
    proc = subprocess.run(['bash', osp.join(ROOT, 'tools', 'misc', 'setup_gpu_node.sh'),
                           str(tmp_path / 'missing')], capture_output=True, text=True)
    assert proc.returncode == 2 and "made by 'make wheelhouse'" in proc.stderr
