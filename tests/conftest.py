"""Fixtures shared across test modules: the tiny generated datasets, made once per session,
two-process (gloo) training runs through tools/dist_train.sh, run once per base config."""
import os
import os.path as osp
import socket

import pytest

from cluster_runs import make_cluster_data
from helpers import EXIT_PROBE_ENV, WARM_TOOLS, head_user_config, make_tiny_data, run_tool

# Iterations of each distributed run: DDP's bookkeeping breaks on the second one, so run more.
DIST_ITERATIONS = 3

# `make test` runs the suite in two pytest-xdist workers. Each takes whole test modules
# (module fixtures run once); modules that share an expensive session fixture go to one
# worker together, so it runs once too.
SHARED_FIXTURE_GROUPS = {'test_distributed': 'dist_train', 'test_detseg_tools': 'dist_train'}


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (a GPU node's) runs the suite too
def pytest_xdist_make_scheduler(config, log):
    """xdist's per-module scheduling (``--dist loadscope``) with the groups above."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split('::', 1)[0]
            return SHARED_FIXTURE_GROUPS.get(osp.splitext(osp.basename(module))[0], module)

    # In the order of LONGEST_FIRST below, not xdist's default (most tests first).
    config.option.loadscopereorder = False
    return ModuleGroupScheduling(config, log)


# The modules that take longest (worker seconds in a full run, 2026-12-04: 600 down to 112)
# start first: a worker that drew one of them last would finish minutes after the other went
# idle (longest first, as a scheduler of jobs of known length does). The rest keep their order.
LONGEST_FIRST = ('test_every_model', 'test_benchmarks', 'test_slurm', 'test_distributed',
                 'test_detseg_tools', 'test_cluster_units', 'test_onnx_export',
                 'test_cluster_training', 'test_python_api', 'test_resume', 'test_custom_data',
                 'test_demo', 'test_gpu_check', 'test_two_nodes_netns')


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept


def pytest_configure(config):
    """In a worker of several, take its share of the cores: the torch threads of this process
    and of the tools its tests start (``OMP_NUM_THREADS``; torchrun's ranks take 1 anyway)."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if workers > 1:
        import torch
        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ['OMP_NUM_THREADS'] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(scope='session', autouse=True)
def _stop_warm_tools():
    """The fork server of ``run_tool(..., warm=True)``, if a test started it, ends with the
    session."""
    yield
    WARM_TOOLS.close()


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory):
    return make_tiny_data(str(tmp_path_factory.mktemp('data')))


@pytest.fixture(scope='session')
def cluster_data(tmp_path_factory):
    """The data of the cluster scenarios (:func:`cluster_runs.make_cluster_data`)."""
    return make_cluster_data(str(tmp_path_factory.mktemp('cluster_data')))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='session')
def dist_train(tiny_data, tmp_path_factory):
    """``dist_train(base)`` -> (config, work_dir, process): a user config inheriting
    ``configs/<base>`` (:func:`helpers.head_user_config`, the heads at test size) trained by
    two CPU processes through tools/dist_train.sh for DIST_ITERATIONS iterations (4 images,
    batch 2 per process: one iteration per epoch for the epoch-based detectors), ending with
    a checkpoint."""
    runs = {}

    def run(base: str):
        if base not in runs:
            root = tmp_path_factory.mktemp(osp.splitext(base)[0])
            work = root / 'work'
            config = head_user_config(str(root / 'user.py'), base, tiny_data, str(work),
                                      max_epochs=DIST_ITERATIONS, max_iters=DIST_ITERATIONS)
            proc = run_tool(['dist_train.sh', config, '2'], timeout=600,
                            env=dict(PORT=str(free_port()), **EXIT_PROBE_ENV))
            runs[base] = (config, work, proc)
        return runs[base]

    return run


@pytest.fixture
def checkpoint_calls(monkeypatch):
    """A list that grows by one at each call of ``torch.utils.checkpoint.checkpoint`` (what
    ``with_cp``, timm's ``set_grad_checkpointing`` and transformers'
    ``gradient_checkpointing_enable`` run, one call per recomputed block)."""
    import torch.utils.checkpoint
    calls = []
    original = torch.utils.checkpoint.checkpoint

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, 'checkpoint', counting)
    return calls
