"""Training as it fails on clusters, end to end with real processes under torchrun: two
"nodes" training together, a rank SIGKILLed and restarted, preemption by SIGTERM (slurm's own
signals, preemption and requeues: tests/test_engine/test_slurm.py, under real slurm daemons). Two
processes with two persistent data workers each, epoch-based, random resize and flip, drop
path on; each interrupted run must end with the weights of the uninterrupted run, bit for
bit."""
import os
import os.path as osp
import signal

import pytest

from cvt_mm.checkpoint import read_checkpoint
from cvt_mm.engine import PREEMPTED_EXIT_CODE

from cluster_runs import (
    alive_after,
    assert_same_weights,
    children,
    drop_checkpoints,
    exact_config,
    launcher_pid,
    local_rank,
    pointer_is,
    run,
    start,
    wait_for,
)
from helpers import (
    TOOLS,
    assert_no_gloo_threads_at_exit,
    det_user_config,
    executed_iterations,
    free_port,
    narrow_config,
)

pytestmark = pytest.mark.slow


def _dist_train(config, work, extra=(), env=None):
    return ['tools/dist_train.sh', config, '2', '--work-dir', str(work), *extra], \
        dict(PORT=str(free_port()), **(env or {}))


def _started_past_iteration_2(config, work, log):
    """(shell, torchrun pid) of a two-process run with one restart allowed, once its
    iteration-2 checkpoint exists: the next iteration, 3 of 3, is mid-epoch."""
    args, env = _dist_train(config, work, env=dict(MAX_RESTARTS='1'))
    shell = start(args, log, env)
    torchrun = launcher_pid(shell, 'torch.distributed.run')
    wait_for(pointer_is(work, 'iter_2.pth'), shell, 'the iteration-2 checkpoint')
    return shell, torchrun


def _ended_as_uninterrupted(work, reference, runs) -> None:
    """Each rank completed the iterations ``runs`` (one list per run) and the final weights
    are the uninterrupted run's, bit for bit; the run's checkpoints are then deleted."""
    for rank in range(2):
        assert executed_iterations(work, rank) == runs
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


@pytest.fixture(scope='module')
def reference_run(cluster_data, det_reference, tmp_path_factory):
    """(root, config, final checkpoint of its uninterrupted run): the narrow Mask R-CNN of two
    processes, whose uninterrupted run is trained once in the whole suite (conftest's
    ``det_reference``). (UperNet's runs are killed and resumed at random moments in
    tests/test_engine/test_soak.py.)"""
    root = tmp_path_factory.mktemp('det_cluster')
    return root, exact_config(root, 'det', cluster_data), det_reference


# ----------------------------------------------------------------------------- SIGKILL
def test_a_killed_rank_is_restarted_by_torchrun_and_the_run_ends_as_if_never_killed(
        reference_run):
    root, config, reference = reference_run
    work = root / 'killed'
    log_path = root / 'killed.log'
    with open(log_path, 'w') as log:
        shell, torchrun = _started_past_iteration_2(config, work, log)
        rank1 = next(p for p in children(torchrun) if local_rank(p) == 1)
        workers = children(rank1)
        assert len(workers) == 2  # its persistent data workers
        os.kill(rank1, signal.SIGKILL)  # mid-epoch: iteration 3 of 3
        assert not alive_after(workers, 15), 'the killed rank left orphaned workers'
        assert shell.wait(timeout=900) == 0
    text = log_path.read_text()
    first, restarted = text.split('torchrun restart 1 of 1', 1)
    assert 'stopping after iteration' not in first  # the survivor wrote nothing partial
    assert f'resuming from {work}/iter_2.pth (iteration 2, epoch 0)' in restarted
    assert 'Resuming epoch 1 at batch 3/3' in restarted
    # Killed in iteration 3: both ranks completed 2, then the restart completed 3 to 6.
    _ended_as_uninterrupted(work, reference, [[1, 2], [3, 4, 5, 6]])


# ----------------------------------------------------------------------------- preemption
def test_preemption_writes_a_checkpoint_mid_epoch_and_the_resumed_run_ends_identically(
        reference_run):
    root, config, reference = reference_run
    work = root / 'preempted'
    _preempt_torchrun(root, config, work)
    _ended_as_uninterrupted(work, reference, [[1, 2, 3, 4, 5], [6]])


def _preempt_torchrun(root, config, work):
    """SIGTERM to torchrun (as Kubernetes does), which forwards it to the ranks; a second
    SIGTERM reaches rank 0 while it writes the checkpoint; then ``--resume``."""
    log_path = root / 'preempted.log'
    args, env = _dist_train(config, work)
    with open(log_path, 'w') as log:
        shell = start(args, log, env)
        torchrun = launcher_pid(shell, 'torch.distributed.run')
        wait_for(pointer_is(work, 'iter_4.pth'), shell, 'the iteration-4 checkpoint')
        rank0 = next(p for p in children(torchrun) if local_rank(p) == 0)
        os.kill(torchrun, signal.SIGTERM)
        wait_for(lambda: 'stopping after iteration 5 on every process' in
                  log_path.read_text(), shell, 'the preemption checkpoint')
        os.kill(rank0, signal.SIGTERM)  # again, during the save
        shell.wait(timeout=300)
    text = log_path.read_text()
    assert 'SIGTERM during the preemption checkpoint: ignored' in text
    assert f'exit code {PREEMPTED_EXIT_CODE}' in text
    # The preempted ranks tore the process group down too (tools/train.py, after the hook).
    assert_no_gloo_threads_at_exit(text, ranks=2)
    meta = read_checkpoint(str(work / 'iter_5.pth'))['meta']
    assert (meta['iter'], meta['epoch']) == (5, 1)  # epoch 2, batch 2 of 3
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_5.pth')
    args, env = _dist_train(config, work, ['--resume'])
    assert run(args, root / 'resumed.log', env) == 0
    resumed = (root / 'resumed.log').read_text()
    assert f'--resume: resuming from {work}/iter_5.pth' in resumed
    assert 'Resuming epoch 2 at batch 3/3' in resumed


def test_a_killed_launcher_stops_its_ranks_at_a_checkpoint_and_resume_ends_identically(
        reference_run):
    """SIGKILL of torchrun (found by tests/soak.py: its ranks trained on, writing
    checkpoints beside the job then resumed in their work dir): the ranks get SIGTERM
    (cvt_mm.apis.launch.stop_with_launcher), write the next iteration's checkpoint and end;
    ``--resume`` continues from it to the uninterrupted run's weights."""
    root, config, reference = reference_run
    work = root / 'launcher_killed'
    log_path = root / 'launcher_killed.log'
    with open(log_path, 'w') as log:
        shell, torchrun = _started_past_iteration_2(config, work, log)
        ranks = children(torchrun)
        os.kill(torchrun, signal.SIGKILL)  # mid-epoch: iteration 3 of 3
        assert shell.wait(timeout=60) == 128 + signal.SIGKILL
        left = alive_after(ranks, 300)
        for rank in left:
            os.kill(rank, signal.SIGKILL)
        assert not left, 'the ranks outlived their killed launcher'
    text = log_path.read_text()
    assert 'SIGTERM: stopping after iteration 3 on every process' in text
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_2.pth', 'iter_3.pth']
    args, env = _dist_train(config, work, ['--resume'])
    assert run(args, root / 'launcher_resumed.log', env) == 0
    assert f'--resume: resuming from {work}/iter_3.pth' in \
        (root / 'launcher_resumed.log').read_text()
    _ended_as_uninterrupted(work, reference, [[1, 2, 3], [4, 5, 6]])


def test_resuming_with_another_number_of_processes_works_and_says_it_is_not_exact(
        reference_run):
    root, config, reference = reference_run
    work = root / 'one_process'
    work.mkdir()
    (work / 'iter_2.pth').write_bytes((reference.parent / 'iter_2.pth').read_bytes())
    log_path = root / 'one_process.log'
    assert run([osp.join(TOOLS, 'dist_train.sh'), config, '1', '--work-dir', str(work),
                 '--resume'], log_path, dict(PORT=str(free_port()))) == 0
    text = log_path.read_text()
    assert 'Resuming a checkpoint written by 2 processes with 1: training continues, but ' \
           'not exactly' in text
    # 2 of 3 batches done by two processes: 4 of 6 for one.
    assert 'Resuming epoch 1 at batch 5/6' in text and 'Epoch(train) [2][6/6]' in text
    drop_checkpoints(work)


# ----------------------------------------------------------------------------- two nodes
def test_two_nodes_train_together_and_write_one_checkpoint(tiny_data, tmp_path):
    """Two nodes of one process each on 127.0.0.1 (gloo) train one detector together
    through tools/dist_train.sh (NNODES=2, two torchrun agents with node ranks 0 and 1).
    Nodes with addresses of their own: tests/test_engine/test_two_nodes_netns.py."""
    config = narrow_config(det_user_config(str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'),
                                           max_epochs=3), 'det')
    port = str(free_port())
    logs = [open(tmp_path / f'node{n}.log', 'w') for n in range(2)]
    nodes = [start(['tools/dist_train.sh', config, '1'], logs[n],
                    dict(NNODES='2', NODE_RANK=str(n), MASTER_ADDR='127.0.0.1', PORT=port))
             for n in range(2)]
    codes = [node.wait(timeout=900) for node in nodes]
    texts = [log_path.read_text() for log_path in sorted(tmp_path.glob('node*.log'))]
    assert codes == [0] * len(nodes), ''.join(t[-3000:] for t in texts)
    assert 'GPU number: 2' in texts[0]  # MMEngine's world size
    assert 'Epoch(train) [3][1/1]' in texts[0]  # 4 images, 2 per process: 1 iteration/epoch
    assert sum(t.count('Saving checkpoint at 3 epochs') for t in texts) == 1
    work = tmp_path / 'work'
    assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_3.pth']
    assert read_checkpoint(str(work / 'epoch_3.pth'))['resume_state']['world_size'] == 2
