"""Where the test suite's CPU goes: a pytest plugin that counts, for each test, the CPU time of
every process the test started (fork-server children, torchrun ranks, slurm daemons and
their jobs, data workers), not only of the processes pytest waited for.

How: Linux cgroup v1 ``cpuacct`` accounting (root). The controller makes a group for the run
and enters it, so the workers are in it too; before each test a worker makes a group of its
own for the test and moves itself and its ``multiprocessing`` fork server (the warm tools',
tests/warm_tools.py) into it; what they start during the test inherits the group. A process
that outlives its test (a module's slurm daemons and what they start) is counted to the test
that started it. At the end the controller writes one row per test and prints the modules.

    CVT_MM_SUITE_CPU=/tmp/suite_cpu.tsv PYTHONPATH=. bash tools/misc/cpu_malloc.sh \\
        .venv/bin/python -m pytest tests -n 3 --dist loadfile --no-loadscope-reorder \\
        -p benchmarks.suite_cpu

Without ``CVT_MM_SUITE_CPU`` the plugin does nothing. The report's rows:
``CPU_SECONDS<TAB>NODEID``; the first row is the whole run (``<suite>``).
"""
import collections
import os
import os.path as osp
import time

import pytest

CPUACCT = '/sys/fs/cgroup/cpuacct'
_GROUP_VAR = 'CVT_MM_SUITE_CPU_GROUP'


def _enter(group: str, pids) -> None:
    for pid in pids:
        try:
            with open(osp.join(group, 'cgroup.procs'), 'w') as f:
                f.write(str(pid))
        except (ProcessLookupError, FileNotFoundError):
            pass  # ended meanwhile


def _children(pid: int) -> list:
    try:
        return [int(c) for task in os.listdir(f'/proc/{pid}/task')
                for c in open(f'/proc/{pid}/task/{task}/children').read().split()]
    except OSError:
        return []


def _fork_servers(pid: int) -> list:
    found = []
    for child in _children(pid):
        try:
            with open(f'/proc/{child}/cmdline', 'rb') as f:
                if b'forkserver' in f.read():
                    found.append(child)
        except OSError:
            pass
    return found


def _seconds(group: str) -> float:
    with open(osp.join(group, 'cpuacct.usage')) as f:
        return int(f.read()) / 1e9


def pytest_configure(config):
    report = os.environ.get('CVT_MM_SUITE_CPU')
    if not report or os.environ.get(_GROUP_VAR):  # off, or a worker (the group is set)
        return
    if not os.access(osp.join(CPUACCT, 'cgroup.procs'), os.W_OK):
        raise pytest.UsageError(f'CVT_MM_SUITE_CPU needs a writable cgroup v1 cpuacct '
                                f'hierarchy at {CPUACCT} (root); this machine has none')
    group = osp.join(CPUACCT, f'cvt_mm_suite_{os.getpid()}')
    os.makedirs(group)
    _enter(group, [os.getpid()])
    os.environ[_GROUP_VAR] = group  # the workers, started after this, read it
    config._suite_cpu = (group, report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    group = os.environ.get(_GROUP_VAR)
    if group and os.environ.get('CVT_MM_SUITE_CPU'):
        worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
        test = osp.join(group, f'{worker}_{time.monotonic_ns()}')
        os.makedirs(test)
        _enter(test, [os.getpid()] + _fork_servers(os.getpid()))
        # The group's name is its test's row; a file beside the groups holds the test's id.
        with open(f'{osp.dirname(os.environ["CVT_MM_SUITE_CPU"])}/.suite_cpu_'
                  f'{osp.basename(group)}.ids', 'a') as f:
            f.write(f'{osp.basename(test)}\t{item.nodeid}\n')
    yield


def pytest_unconfigure(config):
    group, report = getattr(config, '_suite_cpu', (None, None))
    if group is None:
        return
    ids = f'{osp.dirname(report)}/.suite_cpu_{osp.basename(group)}.ids'
    rows = []
    if osp.exists(ids):
        for line in open(ids):
            name, nodeid = line.rstrip('\n').split('\t', 1)
            rows.append((_seconds(osp.join(group, name)), nodeid))
        os.remove(ids)
    total = _seconds(group)
    with open(report, 'w') as f:
        f.write(f'{total:.1f}\t<suite>\n')
        f.writelines(f'{cpu:.1f}\t{nodeid}\n' for cpu, nodeid in sorted(rows, reverse=True))
    modules = collections.Counter()
    for cpu, nodeid in rows:
        modules[nodeid.split('::')[0]] += cpu
    print(f'\nsuite_cpu: {total:.0f} CPU s in all, {sum(modules.values()):.0f} in the tests; '
          f'per module (rows per test in {report}):')
    for module, cpu in modules.most_common():
        print(f'{cpu:9.1f}  {module}')
    _remove(group)


def _remove(group: str) -> None:
    """Every process still in the run's groups back to the root group, then the groups."""
    for sub in sorted((d for d in os.listdir(group) if osp.isdir(osp.join(group, d))),
                      reverse=True) + ['']:
        path = osp.join(group, sub)
        for pid in open(osp.join(path, 'cgroup.procs')).read().split():
            _enter(CPUACCT, [pid])
        try:
            os.rmdir(path)
        except OSError:  # a process that entered it meanwhile: left for the next run's eyes
            pass
