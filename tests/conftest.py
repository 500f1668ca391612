"""Fixtures shared across test modules: the tiny generated datasets, made once per session,
two-process (gloo) training runs through tools/dist_train.sh, run once per base config, the
cluster tests' uninterrupted run, once per session; the order and grouping of the test modules
in pytest-xdist's workers."""
import fcntl
import os
import os.path as osp
import pickle

import pytest

from cluster_runs import exact_config, make_cluster_data, run
from helpers import (
    DIST_ITERATIONS,
    EXIT_PROBE_ENV,
    free_port,
    head_user_config,
    make_tiny_data,
    run_tool,
)

# `make test` runs the suite in two pytest-xdist workers with `--dist loadfile
# --no-loadscope-reorder` (Makefile): a worker takes one test module at a time, whole (module
# fixtures run once), in the order below. (`--dist loadgroup` groups nothing with pytest 9.2
# and xdist 3.8: pytest-dev/pytest-xdist#1386.)
# The modules that take longest (worker seconds in a full run, 2026-12-04: 600 down to 112)
# start first: a worker that drew one of them last would finish minutes after the other went
# idle (longest first, as a scheduler of jobs of known length does). The rest keep their order;
# --no-loadscope-reorder keeps xdist from sorting the modules by their number of tests instead.
LONGEST_FIRST = ('test_every_model', 'test_benchmarks', 'test_slurm', 'test_distributed',
                 'test_detseg_tools', 'test_trained_floors', 'test_cluster_units',
                 'test_onnx_export', 'test_onnx_end2end', 'test_onnx_trained',
                 'test_cluster_training', 'test_soak', 'test_python_api',
                 'test_resume', 'test_custom_data', 'test_demo', 'test_gpu_check',
                 'test_two_nodes_netns')


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept


def _read_toolbox_metafiles_once():
    """MMEngine resolves each ``mmdet::`` (``mmseg::``, ``mmpretrain::``) base of a config by
    first reading all the toolbox's metafiles (about 100 YAML files, then it falls back to the
    base's path): 0.1 s a base, 0.4 s a parse of a detection config of ours, and some 20 s of
    each worker's collection (2026-12-07, GEMM 116). They do not change while the suite runs:
    this process reads each once. The tools the tests start read them as a user's run does."""
    from mmengine.config import utils
    load, read = utils.load, {}

    def load_once(file, *args, **kwargs):
        if args or kwargs or not isinstance(file, str):
            return load(file, *args, **kwargs)
        if file not in read:
            read[file] = load(file)
        return read[file]  # mmengine only looks up its config names in it

    utils.load = load_once


def pytest_configure(config):
    """In a worker of several, take its share of the cores: the torch threads of this process
    and of the tools its tests start (``OMP_NUM_THREADS``; torchrun's ranks take 1 anyway).
    A run in several workers that splits modules is warned about. The toolboxes' metafiles
    are read once (:func:`_read_toolbox_metafiles_once`)."""
    _read_toolbox_metafiles_once()
    dist = config.getoption('dist', None)
    if config.getoption('numprocesses', None) and dist != 'loadfile':
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f'-n with --dist {dist}: the tests of a module are split across workers, so its '
            'module fixtures run in each; `make test` passes --dist loadfile '
            '--no-loadscope-reorder'),
            stacklevel=2)
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if workers > 1:
        import torch
        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ['OMP_NUM_THREADS'] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory):
    return make_tiny_data(str(tmp_path_factory.mktemp('data')))


@pytest.fixture(scope='session')
def cluster_data(tmp_path_factory):
    """The data of the cluster scenarios (:func:`cluster_runs.make_cluster_data`)."""
    return make_cluster_data(str(tmp_path_factory.mktemp('cluster_data')))


def _shared_folder(tmp_path_factory, name: str):
    """A folder every xdist worker of this run sees (the controller's temporary folder; each
    worker has its own below it), for a session fixture run once by whichever worker asks
    first, under a lock there (xdist's documented way to run a session fixture once)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        shared = shared.parent
    shared = shared / name
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope='session')
def det_reference(tmp_path_factory):
    """The final checkpoint (``iter_6.pth``; ``iter_2.pth`` and ``iter_4.pth`` beside it) of the
    uninterrupted two-process run of the cluster tests' narrow Mask R-CNN
    (:func:`cluster_runs.exact_config` on :func:`cluster_runs.make_cluster_data`'s data)
    through tools/dist_train.sh, trained once in the whole run by whichever worker asks first.

    Every interrupted run of that config, under any launcher, must end with these weights bit
    for bit (tests/test_engine/test_cluster_training.py, test_slurm.py, test_two_nodes_netns.py):
    the launchers train alike, two ranks of one process each reading the same shards
    (2026-12-07: this run and an uninterrupted two-task ``sbatch tools/slurm_sbatch.sh`` job,
    ``--launcher slurm``, ended with equal tensors; the two-node run of
    test_two_nodes_netns.py is compared with it too). Its files are read, never written, by
    the tests."""
    shared = _shared_folder(tmp_path_factory, 'det_reference')
    work, done = shared / 'uninterrupted', shared / 'done'
    with open(f'{shared}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():  # a run that failed left none: run it again
            config = exact_config(shared, 'det', make_cluster_data(str(shared / 'data')))
            log = shared / 'uninterrupted.log'
            code = run(['tools/dist_train.sh', config, '2', '--work-dir', str(work)], log,
                       dict(PORT=str(free_port())))
            assert code == 0 and (work / 'iter_6.pth').exists(), log.read_text()[-3000:]
            done.touch()
    return work / 'iter_6.pth'


@pytest.fixture(scope='session')
def dist_train(tiny_data, tmp_path_factory):
    """``dist_train(base)`` -> (config, work_dir, process): a user config inheriting
    ``configs/<base>`` (:func:`helpers.head_user_config`, the heads at test size) trained by
    two CPU processes through tools/dist_train.sh for DIST_ITERATIONS iterations (4 images,
    batch 2 per process: one iteration per epoch for the epoch-based detectors), ending with
    a checkpoint.

    Once per base in the whole run, whichever xdist worker asks first (test_distributed.py and
    test_detseg_tools.py both train Mask R-CNN CvT-13; :func:`_shared_folder`). Its files are
    read, never written, by the tests."""
    shared = _shared_folder(tmp_path_factory, 'dist_train')
    runs = {}

    def run(base: str):
        if base not in runs:
            root = shared / osp.splitext(base)[0]
            result = root / 'result.pkl'
            with open(f'{root}.lock', 'w') as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                if not result.exists():  # a run that failed wrote none: run it again
                    root.mkdir(exist_ok=True)
                    config = head_user_config(str(root / 'user.py'), base, tiny_data,
                                              str(root / 'work'), max_epochs=DIST_ITERATIONS,
                                              max_iters=DIST_ITERATIONS)
                    proc = run_tool(['dist_train.sh', config, '2'], timeout=600,
                                    env=dict(PORT=str(free_port()), **EXIT_PROBE_ENV))
                    with open(result, 'wb') as f:
                        pickle.dump((config, proc), f)
                with open(result, 'rb') as f:
                    config, proc = pickle.load(f)
            runs[base] = (config, root / 'work', proc)
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
