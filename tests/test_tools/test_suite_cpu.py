"""benchmarks/suite_cpu.py, the plugin behind docs/benchmarks.md's per-module CPU table: a
test's row counts the processes it started that nobody waited for, in a run of pytest with
two workers, and the run leaves no group behind."""
import glob
import os
import os.path as osp
import subprocess
import sys

import pytest

from helpers import ROOT

CPUACCT = '/sys/fs/cgroup/cpuacct'

# test_burns starts a process that spends 1 s of CPU and is never waited for (its CPU is in
# no rusage of the test's process); test_idles does nothing.
SUITE = '''
import os, subprocess, sys, time

def test_burns(tmp_path):
    done = tmp_path / 'done'
    subprocess.Popen([sys.executable, '-c', "import sys, time\\n"
                      "while time.process_time() < 1.0: pass\\n"
                      "open(sys.argv[1], 'w').close()", str(done)])
    while not done.exists():
        time.sleep(0.05)

def test_idles():
    pass
'''


@pytest.mark.skipif(not os.access(osp.join(CPUACCT, 'cgroup.procs'), os.W_OK),
                    reason='needs a writable cgroup v1 cpuacct hierarchy (root)')
def test_each_test_counts_the_processes_it_started(tmp_path):
    (tmp_path / 'test_suite.py').write_text(SUITE)
    report = tmp_path / 'out' / 'cpu.tsv'
    report.parent.mkdir()
    before = set(glob.glob(osp.join(CPUACCT, 'cvt_mm_suite_*')))
    env = dict(os.environ, CVT_MM_SUITE_CPU=str(report), PYTHONPATH=ROOT)
    env.pop('CVT_MM_SUITE_CPU_GROUP', None)  # this suite's own run may be measured
    proc = subprocess.run([sys.executable, '-m', 'pytest', str(tmp_path / 'test_suite.py'),
                           '-n', '2', '-p', 'benchmarks.suite_cpu', '-q', '-p',
                           'no:cacheprovider'], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {nodeid.split('::')[-1]: float(cpu) for cpu, nodeid in
            (line.split('\t') for line in report.read_text().splitlines())}
    assert rows['test_burns'] >= 1.0, rows
    assert rows['test_idles'] < 0.5, rows
    assert rows['<suite>'] >= rows['test_burns'] + rows['test_idles']
    assert 'suite_cpu: ' in proc.stdout and 'test_suite.py' in proc.stdout
    assert set(glob.glob(osp.join(CPUACCT, 'cvt_mm_suite_*'))) == before
    assert os.listdir(report.parent) == ['cpu.tsv']


def test_without_the_variable_the_plugin_does_nothing(tmp_path):
    (tmp_path / 'test_suite.py').write_text('def test_idles():\n    pass\n')
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop('CVT_MM_SUITE_CPU', None)
    proc = subprocess.run([sys.executable, '-m', 'pytest', str(tmp_path / 'test_suite.py'),
                           '-p', 'benchmarks.suite_cpu', '-q', '-p', 'no:cacheprovider'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and 'suite_cpu' not in proc.stdout, proc.stdout[-3000:]
