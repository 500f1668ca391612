"""Training as it fails on clusters, end to end with real processes: two "nodes" training
together, a rank SIGKILLed and restarted by torchrun, preemption by SIGTERM and by slurm's
SIGUSR1 with a requeue. Two processes with two persistent data workers each, epoch-based,
random resize and flip, drop path on; each interrupted run must end with the weights of the
uninterrupted run, bit for bit."""
import os
import os.path as osp
import signal
import subprocess
import sys
import time

import pytest
import torch

from cvt_mm.checkpoint import read_checkpoint
from cvt_mm.engine import PREEMPTED_EXIT_CODE

from conftest import free_port
from helpers import (
    PACE,
    PACED_ENV,
    ROOT,
    TOOLS,
    det_user_config,
    load_tool,
    narrow_config,
    seg_user_config,
)

pytestmark = pytest.mark.slow

FAKE_SLURM = osp.join(ROOT, 'tests', 'fake_slurm')
# Same thread count under torchrun (which sets it) and the slurm stand-in: floating-point
# sums depend on it, and runs are compared bit for bit.
BASE_ENV = dict(OMP_NUM_THREADS='1', PYTHON=sys.executable)


# ----------------------------------------------------------------------------- processes
def _children(pid: int) -> list:
    kids = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    if int(f.read().rsplit(')', 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def _local_rank(pid: int):
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            env = dict(v.split(b'=', 1) for v in f.read().split(b'\0') if b'=' in v)
    except OSError:
        return None
    return int(env[b'LOCAL_RANK']) if b'LOCAL_RANK' in env else None


def _alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _launcher_pid(shell: subprocess.Popen, name: str) -> int:
    """The torchrun (or srun) process under a launcher script."""
    deadline = time.time() + 60
    while time.time() < deadline:
        for pid in _children(shell.pid):
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                if name.encode() in f.read():
                    return pid
        time.sleep(0.05)
    raise AssertionError(f'no {name} under {shell.args}')


def _start(args, log, env=None) -> subprocess.Popen:
    full = dict(os.environ, **BASE_ENV, **(env or {}))
    # The narrow models' iterations are paced (helpers.narrow_config): a signal sent when
    # a checkpoint appears lands in the next iteration, or in the save, on any machine.
    full['PYTHONPATH'] = os.pathsep.join([ROOT, PACED_ENV['PYTHONPATH'],
                                          full.get('PYTHONPATH', '')])
    return subprocess.Popen(['bash', *args], cwd=ROOT, env=full, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _run(args, log_path, env=None, timeout=900) -> int:
    with open(log_path, 'a') as log:
        proc = _start(args, log, env)
        return proc.wait(timeout=timeout)


def _wait_for(predicate, proc, what: str, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f'the run ended before {what}'
        assert time.time() < deadline, f'timed out waiting for {what}'
        time.sleep(0.02)


def _pointer_is(work, name):
    def check():
        try:
            return (work / 'last_checkpoint').read_text().strip().endswith(name)
        except OSError:
            return False
    return check


def _drop_checkpoints(work) -> None:
    """Delete a finished scenario's checkpoints once compared (pytest keeps the last
    three runs' temporary folders)."""
    for path in work.glob('*.pth'):
        path.unlink()


def _weights(path):
    return read_checkpoint(str(path))['state_dict']


def _assert_same_weights(reference, resumed):
    a, b = _weights(reference), _weights(resumed)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


# ----------------------------------------------------------------------------- configs
def _exact_config(root, kind: str, data: str) -> str:
    """A user config of Mask R-CNN or UperNet on a narrow CvT (drop path 0.1) for two
    processes: 3 iterations per epoch, 2 epochs, checkpoints every 2 iterations, two
    persistent workers per process, random resize and flip, seeded and deterministic."""
    base = str(root / f'{kind}_user.py')
    if kind == 'det':
        det_user_config(base, 'mask_rcnn_cvt13_coco.py', osp.join(data, 'coco'),
                        str(root / 'unused'), max_epochs=2)
        pipeline = '''[
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomResize', scale=(96, 96), ratio_range=(0.8, 1.2), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]'''
        batch, loop = 1, "dict(max_epochs=2, val_interval=1)"
    else:
        seg_user_config(base, osp.join(data, 'ade'), str(root / 'unused'))
        pipeline = '''[
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(64, 64), ratio_range=(1.0, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=(64, 64)),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]'''
        # UperNet's pooling module needs two images per batch for its BatchNorm.
        batch = 2
        loop = "dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs=2, val_interval=10)"
    path = root / f'{kind}_exact.py'
    path.write_text(f'''_base_ = {narrow_config(base, kind, PACE)!r}
train_pipeline = {pipeline}
train_dataloader = dict(batch_size={batch}, num_workers=2, persistent_workers=True,
                        sampler=dict(type='DefaultSampler', shuffle=True),
                        dataset=dict(pipeline=train_pipeline))
train_cfg = {loop}
randomness = dict(seed=0, deterministic=True)
default_hooks = dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2),
                     logger=dict(interval=1))
''')
    return str(path)


@pytest.fixture(scope='module')
def cluster_data(tmp_path_factory):
    """6 COCO-layout and 12 ADE-layout training images: 3 iterations per epoch for two
    processes at batch 1 (detection) and 2 (segmentation)."""
    out = str(tmp_path_factory.mktemp('cluster_data'))
    load_tool('misc/make_demo_data').main([
        '--out', out, '--size', '96', '--coco-train', '6', '--coco-val', '2', '--ade-train',
        '12', '--ade-val', '2', '--max-objects', '3', '--seed', '3', '--imagenet-train', '0',
        '--imagenet-val', '0'])
    return out


def _dist_train(config, work, extra=(), env=None):
    return ['tools/dist_train.sh', config, '2', '--work-dir', str(work), *extra], \
        dict(PORT=str(free_port()), **(env or {}))


@pytest.fixture(scope='module')
def reference_runs(cluster_data, tmp_path_factory):
    """``get(kind)`` -> (root, config, final checkpoint) of the uninterrupted two-process run
    of ``'det'`` (Mask R-CNN) or ``'seg'`` (UperNet), trained once per module; its
    checkpoints are deleted at the module's end."""
    runs = {}

    def get(kind):
        if kind not in runs:
            root = tmp_path_factory.mktemp(f'{kind}_cluster')
            config = _exact_config(root, kind, cluster_data)
            work = root / 'uninterrupted'
            args, env = _dist_train(config, work)
            assert _run(args, root / 'uninterrupted.log', env) == 0, \
                (root / 'uninterrupted.log').read_text()[-3000:]
            assert (work / 'iter_6.pth').exists()
            runs[kind] = (root, config, work / 'iter_6.pth')
        return runs[kind]

    yield get
    for root, _, reference in runs.values():
        _drop_checkpoints(reference.parent)


# ----------------------------------------------------------------------------- SIGKILL
@pytest.mark.parametrize('kind', ['det', 'seg'])
def test_a_killed_rank_is_restarted_by_torchrun_and_the_run_ends_as_if_never_killed(
        reference_runs, kind):
    root, config, reference = reference_runs(kind)
    work = root / 'killed'
    args, env = _dist_train(config, work, env=dict(MAX_RESTARTS='1'))
    log_path = root / 'killed.log'
    with open(log_path, 'w') as log:
        shell = _start(args, log, env)
        torchrun = _launcher_pid(shell, 'torch.distributed.run')
        _wait_for(_pointer_is(work, 'iter_2.pth'), shell, 'the iteration-2 checkpoint')
        rank1 = next(p for p in _children(torchrun) if _local_rank(p) == 1)
        workers = _children(rank1)
        assert len(workers) == 2  # its persistent data workers
        os.kill(rank1, signal.SIGKILL)  # mid-epoch: iteration 3 of 3
        deadline = time.time() + 15
        while any(_alive(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), 'the killed rank left orphaned workers'
        assert shell.wait(timeout=900) == 0
    text = log_path.read_text()
    first, restarted = text.split('torchrun restart 1 of 1', 1)
    assert 'stopping after iteration' not in first  # the survivor wrote nothing partial
    assert f'resuming from {work}/iter_2.pth (iteration 2, epoch 0)' in restarted
    assert 'Resuming epoch 1 at batch 3/3' in restarted
    _assert_same_weights(reference, work / 'iter_6.pth')
    _drop_checkpoints(work)


# ----------------------------------------------------------------------------- preemption
@pytest.mark.parametrize('kind', ['det', 'seg'])
def test_preemption_writes_a_checkpoint_mid_epoch_and_the_resumed_run_ends_identically(
        reference_runs, kind):
    root, config, reference = reference_runs(kind)
    work = root / 'preempted'
    if kind == 'det':
        _preempt_torchrun(root, config, work)
    else:
        _preempt_slurm(root, config, work)
    _assert_same_weights(reference, work / 'iter_6.pth')
    _drop_checkpoints(work)


def _preempt_torchrun(root, config, work):
    """SIGTERM to torchrun (as Kubernetes does), which forwards it to the ranks; a second
    SIGTERM reaches rank 0 while it writes the checkpoint; then ``--resume``."""
    log_path = root / 'preempted.log'
    args, env = _dist_train(config, work)
    with open(log_path, 'w') as log:
        shell = _start(args, log, env)
        torchrun = _launcher_pid(shell, 'torch.distributed.run')
        _wait_for(_pointer_is(work, 'iter_4.pth'), shell, 'the iteration-4 checkpoint')
        rank0 = next(p for p in _children(torchrun) if _local_rank(p) == 0)
        os.kill(torchrun, signal.SIGTERM)
        _wait_for(lambda: 'stopping after iteration 5 on every process' in
                  log_path.read_text(), shell, 'the preemption checkpoint')
        os.kill(rank0, signal.SIGTERM)  # again, during the save
        shell.wait(timeout=300)
    text = log_path.read_text()
    assert 'SIGTERM during the preemption checkpoint: ignored' in text
    assert f'exit code {PREEMPTED_EXIT_CODE}' in text
    meta = read_checkpoint(str(work / 'iter_5.pth'))['meta']
    assert (meta['iter'], meta['epoch']) == (5, 1)  # epoch 2, batch 2 of 3
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_5.pth')
    args, env = _dist_train(config, work, ['--resume'])
    assert _run(args, root / 'resumed.log', env) == 0
    resumed = (root / 'resumed.log').read_text()
    assert f'--resume: resuming from {work}/iter_5.pth' in resumed
    assert 'Resuming epoch 2 at batch 3/3' in resumed


def _preempt_slurm(root, config, work):
    """tools/slurm_sbatch.sh under a slurm stand-in: SIGUSR1 to every process of the job
    step, data workers included (what ``sbatch --signal=USR1@180`` does), exit code 75, the
    job requeues itself, and the requeued job resumes by itself."""
    log_path = root / 'preempted.log'
    scontrol_log = root / 'scontrol.log'
    env = dict(PATH=FAKE_SLURM + os.pathsep + os.environ['PATH'], SLURM_NTASKS='2',
               SLURM_JOB_ID='4242', SLURM_SUBMIT_DIR=ROOT,
               FAKE_SCONTROL_LOG=str(scontrol_log), MASTER_PORT=str(free_port()))
    args = [osp.join(TOOLS, 'slurm_sbatch.sh'), config, str(work)]
    with open(log_path, 'w') as log:
        shell = _start(args, log, env)
        srun = _launcher_pid(shell, 'srun')
        _wait_for(_pointer_is(work, 'iter_4.pth'), shell, 'the iteration-4 checkpoint')
        tasks = _children(srun)
        for pid in tasks + [w for t in tasks for w in _children(t)]:
            os.kill(pid, signal.SIGUSR1)
        assert shell.wait(timeout=300) == PREEMPTED_EXIT_CODE
    assert 'SIGUSR1: stopping after iteration 5 on every process' in log_path.read_text()
    assert scontrol_log.read_text().split() == ['requeue', '4242']
    env.update(SLURM_RESTART_COUNT='1', MASTER_PORT=str(free_port()))
    assert _run(args, root / 'requeued.log', env) == 0
    requeued = (root / 'requeued.log').read_text()
    assert f'slurm requeue 1, after a preemption, a time limit or a failure: resuming from ' \
           f'{work}/iter_5.pth (iteration 5, epoch 1)' in requeued
    assert 'Resuming epoch 2 at batch 3/3' in requeued


def test_resuming_with_another_number_of_processes_works_and_says_it_is_not_exact(
        reference_runs):
    root, config, reference = reference_runs('det')
    work = root / 'one_process'
    work.mkdir()
    (work / 'iter_2.pth').write_bytes((reference.parent / 'iter_2.pth').read_bytes())
    log_path = root / 'one_process.log'
    assert _run([osp.join(TOOLS, 'dist_train.sh'), config, '1', '--work-dir', str(work),
                 '--resume'], log_path, dict(PORT=str(free_port()))) == 0
    text = log_path.read_text()
    assert 'Resuming a checkpoint written by 2 processes with 1: training continues, but ' \
           'not exactly' in text
    # 2 of 3 batches done by two processes: 4 of 6 for one.
    assert 'Resuming epoch 1 at batch 5/6' in text and 'Epoch(train) [2][6/6]' in text
    _drop_checkpoints(work)


# ----------------------------------------------------------------------------- two nodes
@pytest.mark.parametrize('launcher', ['torchrun', 'slurm'])
def test_two_nodes_train_together_and_write_one_checkpoint(tiny_data, tmp_path, launcher):
    """Two nodes of one process each on 127.0.0.1 (gloo) train one detector together:
    through tools/dist_train.sh (NNODES=2, two torchrun agents with node ranks 0 and 1), or
    through tools/slurm_train.sh under the slurm stand-in (tasks with SLURM_NODEID 0 and 1)."""
    config = narrow_config(det_user_config(str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'),
                                           max_epochs=3), 'det')
    port = str(free_port())
    if launcher == 'torchrun':
        logs = [open(tmp_path / f'node{n}.log', 'w') for n in range(2)]
        nodes = [_start(['tools/dist_train.sh', config, '1'], logs[n],
                        dict(NNODES='2', NODE_RANK=str(n), MASTER_ADDR='127.0.0.1', PORT=port))
                 for n in range(2)]
    else:
        logs = [open(tmp_path / 'node0.log', 'w')]
        nodes = [_start(['tools/slurm_train.sh', 'partition', 'job', config,
                         str(tmp_path / 'work')], logs[0],
                        dict(PATH=FAKE_SLURM + os.pathsep + os.environ['PATH'], GPUS='2',
                             GPUS_PER_NODE='1', MASTER_PORT=port,
                             FAKE_NODELIST='localhost,localhost'))]
    codes = [node.wait(timeout=900) for node in nodes]
    texts = [log_path.read_text() for log_path in sorted(tmp_path.glob('node*.log'))]
    assert codes == [0] * len(nodes), ''.join(t[-3000:] for t in texts)
    assert 'GPU number: 2' in texts[0]  # MMEngine's world size
    assert 'Epoch(train) [3][1/1]' in texts[0]  # 4 images, 2 per process: 1 iteration/epoch
    assert sum(t.count('Saving checkpoint at 3 epochs') for t in texts) == 1
    work = tmp_path / 'work'
    assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_3.pth']
    assert read_checkpoint(str(work / 'epoch_3.pth'))['resume_state']['world_size'] == 2
