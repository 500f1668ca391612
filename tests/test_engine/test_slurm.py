"""Training under a real slurm: Debian's slurmctld and slurmd on this machine
(tests/slurm/local_slurm.sh), jobs submitted with sbatch and srun as a user submits them, and
the events a cluster brings: the time-limit signal, a preemption by a job of a higher
partition, a requeue by the scheduler of a job running torchrun. Each interrupted job must
end with the weights of the uninterrupted run, bit for bit (conftest's ``det_reference``:
torchrun's run, which an uninterrupted job of tools/slurm_sbatch.sh equalled).

A requeued job is held by slurm until the credential of its previous run has expired
(2 minutes by default); the test cluster's credentials live 10 s, so requeued jobs start
again 11 s after their requeue."""
import os
import os.path as osp
import re
import subprocess
import sys
import time

import pytest

from cvt_mm.checkpoint import read_checkpoint

from cluster_runs import assert_same_weights, drop_checkpoints, exact_config, pointer_is
from helpers import (
    EXIT_PROBE_ENV,
    PACED_ENV,
    ROOT,
    TOOLS,
    assert_no_gloo_threads_at_exit,
    det_user_config,
    executed_iterations,
    free_port,
    narrow_config,
)

pytestmark = pytest.mark.slow

LOCAL_SLURM = osp.join(ROOT, 'tests', 'slurm', 'local_slurm.sh')
SBATCH_SCRIPT = osp.join(TOOLS, 'slurm_sbatch.sh')


@pytest.fixture(scope='module')
def slurm():
    """The environment of a client of the running one-node cluster (``SLURM_CONF``), the
    training processes' settings (one thread each: runs are compared bit for bit) and the
    paced iterations of the narrow configs. The daemons are stopped at the module's end."""
    proc = subprocess.run(['bash', LOCAL_SLURM, 'start'], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode == 3:  # the script's code for "no root or no apt-get"
        pytest.skip(f'no slurm here: {proc.stderr.strip()}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    conf = proc.stdout.strip().rsplit('export SLURM_CONF=', 1)[1]
    env = dict(os.environ, SLURM_CONF=conf, OMP_NUM_THREADS='1', PYTHON=sys.executable)
    # The jobs below ask for all of the machine's CPUs; a node configured with fewer leaves
    # them pending for ever (as it did when the script counted CPUs with OMP_NUM_THREADS=1).
    node = _slurm(env, 'scontrol', 'show', 'node', '--oneliner')
    assert f'CPUTot={os.cpu_count()} ' in node, node
    # The tasks also report the gloo threads left at their exit (helpers.EXIT_PROBE_ENV).
    env['PYTHONPATH'] = os.pathsep.join([ROOT, PACED_ENV['PYTHONPATH'],
                                         EXIT_PROBE_ENV['PYTHONPATH'], env.get('PYTHONPATH', '')])
    yield env
    subprocess.run(['scancel', '--full', '--user', 'root'], env=env, timeout=60)
    subprocess.run(['bash', LOCAL_SLURM, 'stop'], env=env, timeout=120)


def _slurm(env, *args, timeout=60) -> str:
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f'{" ".join(args)}: {proc.stdout}{proc.stderr}'
    return proc.stdout.strip()


def _sbatch(env, log, *args) -> str:
    """Submit from the repository root, as the docs say; the log is appended to by every
    run of the job (a requeued job starts its script again)."""
    return _slurm(env, 'sbatch', '--parsable', '--output', str(log), '--open-mode=append',
                  *args).split(';')[0]


def _job(env, job) -> dict:
    """JobState, Restarts, ExitCode... of a job, as ``scontrol show job`` tells them."""
    text = _slurm(env, 'scontrol', 'show', 'job', '--oneliner', job)
    return dict(field.split('=', 1) for field in text.split() if '=' in field)


def _wait_job(env, job, states, log, timeout=900) -> dict:
    deadline = time.time() + timeout
    while True:
        info = _job(env, job)
        if info['JobState'] in states:
            return info
        assert time.time() < deadline, (
            f'job {job} still {info["JobState"]} (reason: {info.get("Reason")}), not '
            f'{states}:\n{_tail(log)}\n{_cluster_state(env)}')
        time.sleep(0.2)


def _cluster_state(env) -> str:
    """What the scheduler says about the node and the queue, for failure messages."""
    return '\n'.join(
        subprocess.run(args, env=env, capture_output=True, text=True, timeout=60).stdout
        for args in (['sinfo', '-N', '-l'], ['squeue', '-l'],
                     ['scontrol', 'show', 'node', '--oneliner']))


def _wait_checkpoint(env, job, work, name, log, timeout=900) -> None:
    deadline = time.time() + timeout
    while not pointer_is(work, name)():
        state = _job(env, job)['JobState']
        assert state in ('PENDING', 'RUNNING'), f'job {job} {state} before {name}:\n{_tail(log)}'
        assert time.time() < deadline, f'timed out waiting for {name}:\n{_tail(log)}'
        time.sleep(0.05)


def _requeued_run(env, job, log, *pending_update) -> str:
    """Wait until the job is back in the queue after its requeue (once), then (after
    ``scontrol update JobId=JOB *pending_update`` if given) until it has run again and
    completed; its whole log."""
    info = _wait_job(env, job, ('PENDING', 'COMPLETED', 'FAILED', 'CANCELLED'), log)
    assert info['JobState'] == 'PENDING' and info['Restarts'] == '1', \
        f'{info}\n{_tail(log)}'
    if pending_update:
        _slurm(env, 'scontrol', 'update', f'JobId={job}', *pending_update)
    info = _wait_job(env, job, ('COMPLETED', 'FAILED'), log)
    text = _tail(log, 10 ** 6)
    assert info['JobState'] == 'COMPLETED', text[-4000:]
    return text


def _tail(path, size=4000) -> str:
    try:
        return open(path).read()[-size:]
    except OSError:
        return '(no log)'


@pytest.fixture(scope='module')
def sbatch_reference(cluster_data, det_reference, tmp_path_factory):
    """(root, config, final checkpoint of its uninterrupted run) of the narrow Mask R-CNN
    (2 epochs of 3 iterations for two processes): every interrupted job of it below must end
    with the weights of conftest's ``det_reference``, trained once in the suite by torchrun
    (2026-12-07: an uninterrupted two-task job of tools/slurm_sbatch.sh ended with the same
    tensors)."""
    root = tmp_path_factory.mktemp('slurm')
    return root, exact_config(root, 'det', cluster_data), det_reference


def _task_exit_codes(log: str) -> dict:
    """{task: exit code} of the tasks that srun reported ending with an error
    (``srun: error: NODE: tasks 0-1: Exited with exit code 75``); tasks that exit 0 are not
    reported."""
    codes = {}
    for tasks, code in re.findall(r'srun: error: \S+: tasks? ([\d,-]+): Exited with exit code '
                                  r'(\d+)', log):
        for part in tasks.split(','):
            first, _, last = part.partition('-')
            for task in range(int(first), int(last or first) + 1):
                codes[task] = int(code)
    return codes


def _assert_stopped_and_resumed(text, work, job, signal_name, ranks=2) -> int:
    """The first run of ``job`` stopped on ``signal_name`` after one iteration, every task
    exited with 75 after tearing its process group down, the script requeued the job, and the
    requeued run resumed from the checkpoint written at the signal, mid-epoch. Returns the
    iteration of that checkpoint."""
    first, requeued = text.split('slurm_sbatch: the tasks checkpointed and stopped; '
                                 f'requeueing job {job}', 1)
    stopped = re.search(rf'{signal_name}: stopping after iteration (\d) on every process', first)
    assert stopped and int(stopped.group(1)) < 6, first[-4000:]
    stop = int(stopped.group(1))
    assert _task_exit_codes(first) == {task: 75 for task in range(ranks)}, first[-4000:]
    # Both tasks tore the process group down before exiting with 75: one left to
    # interpreter shutdown can abort a task (-6), which the script would not requeue.
    assert_no_gloo_threads_at_exit(first, ranks=ranks)
    written = f'{work}/iter_{stop}.pth'
    assert f'Preemption checkpoint {written} written in' in first, first[-4000:]
    assert f'slurm requeue 1, after a preemption, a time limit or a failure: resuming from ' \
           f'{written} (iteration {stop}, ' in requeued, requeued[-4000:]
    # Resumed, not restarted: what each task's process completed in each run of the job.
    for rank in range(ranks):
        assert executed_iterations(work, rank) == [list(range(1, stop + 1)),
                                                   list(range(stop + 1, 7))]
    return stop


# How each way of stopping a job reaches it (slurm 22.05.8, src/slurmctld/job_mgr.c and
# src/slurmd/slurmd/req.c): `--signal=USR1@N` makes slurmctld signal every process of the job's
# steps N s before the limit; `--signal=B:USR1@N` makes it send the same request with the
# batch flag (send_job_warn_signal: job_signal with warn_flags = KILL_JOB_BATCH): only the
# batch shell receives it. `scancel --full` signals the batch shell's process group, which
# held srun before tools/slurm_sbatch.sh moved it out (srun answers SIGTERM with SIGKILL to
# its tasks).
STOPS = {
    'whole job, scancel --signal=TERM --full': ([], ['--full', '--signal=TERM'], 'SIGTERM',
                                                True),
}


@pytest.mark.parametrize('stop', list(STOPS))
def test_a_signalled_job_checkpoints_requeues_and_resumes_identically(
        slurm, sbatch_reference, stop):
    """The signal (sent once the iteration-4 checkpoint exists) reaches the tasks, directly or
    through the batch script -> one checkpoint of the next iteration -> exit 75 on every task
    -> the script requeues the job -> it resumes from that checkpoint and ends with the
    weights of the uninterrupted job."""
    sbatch_options, scancel_options, signal_name, through_the_script = STOPS[stop]
    root, config, reference = sbatch_reference
    name = signal_name.lower() + ('_batch' if '--batch' in scancel_options else '')
    work, log = root / name, root / f'{name}.log'
    job = _sbatch(slurm, log, '--ntasks=2', '--requeue', *sbatch_options, SBATCH_SCRIPT,
                  config, str(work))
    _wait_checkpoint(slurm, job, work, 'iter_4.pth', log)
    _slurm(slurm, 'scancel', *scancel_options, job)
    text = _requeued_run(slurm, job, log)
    relayed = f'slurm_sbatch: {signal_name}, passed on to the tasks'
    assert (relayed in text) == through_the_script, text[-4000:]
    assert _assert_stopped_and_resumed(text, work, job, signal_name) == 5
    assert 'Resuming epoch 2 at batch 3/3' in text.split('slurm requeue 1,', 1)[1]
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)

# A real time limit: --time=4 with the signal 150 s before it, so slurmctld sends it 90 to
# 120 s into the job (it looks every 30 s), after the tasks' start-up (the handlers are
# installed then) and while the first run, paced 20 s before each iteration and checkpoint,
# lasts three minutes more. The requeued job's limit is raised to 10 minutes while it waits,
# so that its own signal comes after it has ended: on a loaded CI machine (9 s an iteration)
# the unpaced run once outlasted 90 s. (Whether the script relays it: B: signals the batch
# shell only.)
TIME_LIMITS = {'--signal=USR1@150': False, '--signal=B:USR1@150': True}


@pytest.mark.parametrize('signal_option', list(TIME_LIMITS))
def test_the_time_limit_signal_checkpoints_requeues_and_resumes_identically(
        slurm, sbatch_reference, signal_option):
    """The job reaches its real time limit's warning: SIGUSR1 to the tasks (directly, or
    through the batch script) -> one checkpoint -> exit 75 -> requeued -> resumed from that
    checkpoint, with the weights of the uninterrupted job."""
    root, config, reference = sbatch_reference
    name = 'time_limit_' + ('batch_shell' if 'B:' in signal_option else 'tasks')
    work, log = root / name, root / f'{name}.log'
    pace = f'custom_hooks.{_pace_hook_index(config)}.first_run_seconds=20'
    job = _sbatch(slurm, log, '--ntasks=2', '--requeue', '--time=4', signal_option,
                  SBATCH_SCRIPT, config, str(work), '--cfg-options', pace)
    _wait_job(slurm, job, ('RUNNING', ), log)  # then PENDING again means requeued
    text = _requeued_run(slurm, job, log, 'TimeLimit=10')
    relayed = 'slurm_sbatch: SIGUSR1, passed on to the tasks'
    assert (relayed in text) == TIME_LIMITS[signal_option], text[-4000:]
    _assert_stopped_and_resumed(text, work, job, 'SIGUSR1')
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


def _path_of_a_slow_machine(env, folder) -> str:
    """PATH with a ``scancel`` and a ``scontrol`` in front of slurm's, each calling slurm's:
    the scancel returns only once the batch shell's srun (its parent's child) has ended (a
    relay that outlasts srun, as a scancel waiting for a busy slurmctld's answer can); the
    scontrol, after a ``requeue``, waits to be ended with the job's steps, so that slurm's
    SIGTERM to them finds the batch shell still running (as on a loaded CI machine)."""
    import shutil
    folder.mkdir()
    bash = shutil.which('bash')
    (folder / 'scancel').write_text(f"""#!{bash}
{shutil.which('scancel', path=env['PATH'])} "$@"
for _ in $(seq 1200); do
    pgrep -x srun -P $PPID >/dev/null ||
        exec echo "slow scancel: srun of the batch shell ended before this relay returned"
    sleep 0.1
done
""")
    (folder / 'scontrol').write_text(f"""#!{bash}
{shutil.which('scontrol', path=env['PATH'])} "$@" || exit
[ "$1" != requeue ] || exec sleep 60
""")
    for name in ('scancel', 'scontrol'):
        (folder / name).chmod(0o755)
    return f'{folder}{os.pathsep}{env["PATH"]}'


def _path_without_scancel(env, folder) -> str:
    """PATH with each folder that holds ``scancel`` replaced by links to all else in it."""
    folders = []
    for i, path in enumerate(env['PATH'].split(os.pathsep)):
        if osp.exists(osp.join(path, 'scancel')):
            copy = folder / str(i)
            copy.mkdir(parents=True)
            for name in os.listdir(path):
                if name != 'scancel':
                    os.symlink(osp.join(path, name), copy / name)
            path = str(copy)
        folders.append(path)
    return os.pathsep.join(folders)


# The relay at its limits: its scancel returns only after the tasks it signalled have
# stopped and srun has exited, and no scancel at all (the relay has to reach the tasks
# through srun, which forwards SIGUSR1 to them). On the slow machine the requeue's SIGTERM
# also finds the batch shell still running: it must not relay that one (CI once saw "scancel:
# error: ... Job can not be altered now" there). (PATH of the job, the test's scancel options,
# the tasks' signal, the relay's line, the line after the requeue or None.)
RELAYS = {
    'srun ends during a slow relay': (
        _path_of_a_slow_machine, ['--full', '--signal=TERM'], 'SIGTERM',
        'slow scancel: srun of the batch shell ended before this relay returned',
        'slurm_sbatch: SIGTERM after the tasks ended: nothing to pass on'),
    'no scancel on PATH': (
        _path_without_scancel, ['--batch', '--signal=TERM'], 'SIGUSR1',
        'slurm_sbatch: SIGTERM, no scancel on PATH: passed on to the tasks as SIGUSR1 by srun',
        None),
}


@pytest.mark.parametrize('relay', list(RELAYS))
def test_a_relayed_stop_requeues_and_resumes_identically_whatever_the_relay_meets(
        slurm, sbatch_reference, relay):
    """The batch shell's relay meets a slow scancel (srun exits with 75 before it returns,
    and bash reaps srun during the trap) or none on PATH; the job is requeued all the same
    and resumes from the checkpoint with the weights of the uninterrupted job. On the slow
    machine the requeue's SIGTERM reaches the shell after the tasks ended: not relayed."""
    make_path, scancel_options, signal_name, relayed, after_requeue = RELAYS[relay]
    root, config, reference = sbatch_reference
    name = relay.replace(' ', '_')
    work, log = root / name, root / f'{name}.log'
    env = dict(slurm, PATH=make_path(slurm, root / f'{name}_bin'))
    job = _sbatch(env, log, '--ntasks=2', '--requeue', SBATCH_SCRIPT, config, str(work))
    _wait_checkpoint(slurm, job, work, 'iter_4.pth', log)
    _slurm(slurm, 'scancel', *scancel_options, job)
    text = _requeued_run(slurm, job, log)
    first, requeued = text.split('requeueing job', 1)
    assert relayed in first, text[-4000:]
    if after_requeue is not None:
        after = requeued.split('slurm requeue 1,', 1)[0]
        assert after_requeue in after and 'passed on' not in after, text[-4000:]
    assert _assert_stopped_and_resumed(text, work, job, signal_name) == 5
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


# The batch partition preempts with PreemptMode=REQUEUE, batch_cancel with CANCEL
# (tests/slurm/local_slurm.sh); both send SIGTERM to the tasks at the start of the grace time.
# In CANCEL mode slurm would cancel the job at the grace time's end; the job is still RUNNING
# when the tasks have stopped, so the script's requeue brings it back as REQUEUE mode does.
@pytest.mark.parametrize('partition', ['batch', 'batch_cancel'])
def test_a_preempted_job_checkpoints_in_its_grace_time_and_resumes_identically(
        slurm, sbatch_reference, partition):
    """A job of the `urgent` partition (higher priority tier) needs a CPU the training job
    holds: slurm preempts it, sending SIGTERM to its tasks at the start of the grace time.
    The tasks checkpoint and stop, the job is requeued, the urgent job runs, then the
    training job resumes."""
    root, config, reference = sbatch_reference
    work, log = root / f'preempted_{partition}', root / f'preempted_{partition}.log'
    job = _sbatch(slurm, log, '-p', partition, '--ntasks=2', '--requeue', SBATCH_SCRIPT,
                  config, str(work))
    # The scheduler preempts within a few seconds of the urgent job's submission: ask early
    # enough that the stop lands before the last iteration.
    _wait_checkpoint(slurm, job, work, 'iter_2.pth', log)
    urgent_log = root / f'urgent_{partition}.log'
    urgent = _sbatch(slurm, urgent_log, '-p', 'urgent', '--ntasks=1', '--wrap', 'sleep 1')
    _wait_job(slurm, urgent, ('COMPLETED', ), urgent_log)
    text = _requeued_run(slurm, job, log)
    assert 'passed on to the tasks' not in text  # to the tasks, not to the batch shell
    _assert_stopped_and_resumed(text, work, job, 'SIGTERM')
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


# Endings that signal every process of the job, srun of the batch step included, and leave
# it ending (slurm 22.05: slurmctld marks the job CANCELLED or TIMEOUT, and slurmd's
# _rpc_terminate_job and _rpc_timelimit send SIGTERM to every step, then SIGKILL after
# KillWait). srun says "forcing job termination", but the tasks, signalled themselves, finish
# their iteration and checkpoint within KillWait. (sbatch options, the ending, the pace of the
# first run's iterations in seconds, the job's final state.)
ENDINGS = {
    'scancel JOB': ([], lambda env, job: _slurm(env, 'scancel', job), None, 'CANCELLED'),
    # Paced so that the limit (2 minutes; slurmctld looks every 30 s) falls mid-run, 20 s
    # before each of the 6 iterations and 3 checkpoints: 3 minutes and the start-up. The
    # iteration under way and the checkpoint then take 45 s, 50 under the suite's load (seen:
    # with KillWait at 60 s, srun was killed before it reported the tasks' exit), within the
    # test cluster's KillWait of 120 s (tests/slurm/local_slurm.sh).
    'time limit without --signal': (['--time=2'], None, 20, 'TIMEOUT'),
}


@pytest.mark.parametrize('ending', list(ENDINGS))
def test_a_job_that_slurm_ends_checkpoints_stays_ended_and_resumes_identically(
        slurm, sbatch_reference, ending):
    """Slurm ends the job (a user's plain scancel, the time limit without --signal): the
    tasks checkpoint on the SIGTERM and exit 75, the script sees the job COMPLETING and does
    not requeue it (a requeue would bring a cancelled job back), the checkpoints are whole,
    and ``--resume`` in a new job continues from the one written at the signal and ends with
    the weights of the uninterrupted job."""
    sbatch_options, end, pace, final = ENDINGS[ending]
    root, config, reference = sbatch_reference
    name = re.sub(r'\W+', '_', ending)
    work, log = root / name, root / f'{name}.log'
    paced = [] if pace is None else [
        '--cfg-options', f'custom_hooks.{_pace_hook_index(config)}.seconds={pace}']
    job = _sbatch(slurm, log, '--ntasks=2', '--requeue', *sbatch_options, SBATCH_SCRIPT,
                  config, str(work), *paced)
    if end is not None:
        _wait_checkpoint(slurm, job, work, 'iter_2.pth', log)
        end(slurm, job)
    info = _wait_job(slurm, job, ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT'), log)
    text = _tail(log, 10 ** 6)
    assert (info['JobState'], info['Restarts']) == (final, '0'), f'{info}\n{text[-4000:]}'
    stopped = re.search(r'SIGTERM: stopping after iteration (\d) on every process', text)
    assert stopped, text[-4000:]
    stop = int(stopped.group(1))
    assert _task_exit_codes(text) == {0: 75, 1: 75}, text[-4000:]
    assert f'slurm is ending job {job} (COMPLETING: scancel, or a time limit without ' \
           '--signal), so it is not requeued' in text, text[-4000:]
    # Whole checkpoints only: each loads, no temporary file is left, the pointer names the
    # one written at the signal.
    for path in work.glob('*.pth'):
        read_checkpoint(str(path))
    assert not list(work.glob('.*.part')), list(work.iterdir())
    assert pointer_is(work, f'iter_{stop}.pth')()
    resumed_log = root / f'{name}_resumed.log'
    again = _sbatch(slurm, resumed_log, '--ntasks=2', SBATCH_SCRIPT, config, str(work),
                    '--resume')
    info = _wait_job(slurm, again, ('COMPLETED', 'FAILED', 'CANCELLED'), resumed_log)
    resumed = _tail(resumed_log, 10 ** 6)
    assert info['JobState'] == 'COMPLETED', resumed[-4000:]
    assert f'--resume: resuming from {work}/iter_{stop}.pth' in resumed, resumed[-4000:]
    for rank in range(2):
        assert executed_iterations(work, rank) == [list(range(1, stop + 1)),
                                                   list(range(stop + 1, 7))]
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


def _pace_hook_index(config) -> int:
    from mmengine.config import Config
    hooks = Config.fromfile(config).custom_hooks
    return [h['type'] for h in hooks].index('PaceHook')


def test_torchrun_in_a_job_requeued_by_the_scheduler_resumes_instead_of_starting_over(
        slurm, sbatch_reference, tmp_path):
    """``srun bash tools/dist_train.sh`` in a ``--requeue`` job; the scheduler requeues it
    (``scontrol requeue``) after the iteration-4 checkpoint. torchrun of the requeued job
    counts its own restarts from 0: the job's requeue must still be seen."""
    _, config, reference = sbatch_reference
    work, log = tmp_path / 'requeued', tmp_path / 'requeued.log'
    env = dict(slurm, PORT=str(free_port()))
    job = _sbatch(env, log, '--ntasks=1', '--cpus-per-task=2', '--requeue', '--wrap',
                  f'srun bash tools/dist_train.sh {config} 2 --work-dir {work}')
    _wait_checkpoint(env, job, work, 'iter_4.pth', log)
    _slurm(env, 'scontrol', 'requeue', job)
    text = _requeued_run(env, job, log)
    _, requeued = text.split('slurm requeue 1, after a preemption, a time limit or a failure: '
                             'resuming from', 1)
    resumed = int(re.match(rf' {work}/iter_(\d)\.pth', requeued).group(1))
    assert 'Epoch(train) [1]' not in requeued  # not started over
    for rank in range(2):  # the requeued job's processes went on from that checkpoint
        runs = executed_iterations(work, rank)
        assert len(runs) == 2 and runs[0][:4] == [1, 2, 3, 4], runs
        assert runs[1] == list(range(resumed + 1, 7)), runs
    assert 'Epoch(train) [2][3/3]' in requeued
    assert_same_weights(reference, work / 'iter_6.pth')
    drop_checkpoints(work)


def test_slurm_train_sh_runs_its_tasks_as_one_job(slurm, tiny_data, tmp_path):
    """tools/slurm_train.sh as MMDetection's: ``srun`` with GPUS tasks, GPUS_PER_NODE per
    node and ``--gres=gpu:N`` (the test cluster's gpus are stand-ins: slurm schedules them,
    the tasks train on the CPU); the tasks find their ranks and the master in slurm's
    environment."""
    config = narrow_config(det_user_config(str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'),
                                           max_epochs=3), 'det')
    env = dict(slurm, GPUS='2', GPUS_PER_NODE='2', CPUS_PER_TASK='1')
    proc = subprocess.run(['bash', osp.join(TOOLS, 'slurm_train.sh'), 'batch', 'cvt_mm_test',
                           config, str(tmp_path / 'work')], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'GPU number: 2' in proc.stdout  # MMEngine's world size
    assert proc.stdout.count('Saving checkpoint at 3 epochs') == 1
    work = tmp_path / 'work'
    assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_3.pth']
    assert read_checkpoint(str(work / 'epoch_3.pth'))['resume_state']['world_size'] == 2
