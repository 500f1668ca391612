"""The pieces of cluster-scale training, one at a time: the data loader's saved state, the
batch sampler that starts part-way, data workers that die with their process, the slurm environment,
restart detection, the checkpoint a restart picks, the config changes tools/train.py makes,
and a stop signal that cannot be agreed with a dead peer (real processes, real gloo)."""
import glob
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import DefaultSampler, InfiniteSampler
from mmengine.hooks import Hook
from torch.utils.data import BatchSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import cvt_mm  # noqa: F401
from cvt_mm.apis.launch import (
    choose_resume,
    find_resumable_checkpoint,
    first_slurm_host,
    restart_count,
    slurm_environment,
)
from cvt_mm.engine.exact_resume import (
    SkippingBatchSampler,
    WorkerRandomState,
    capture_random_states,
    data_state,
    restore_random_states,
    start_loader_at,
)
from cvt_mm.engine.hooks.preemption_hook import STOPPED_EXIT_CODE, PreemptionHook
from cvt_mm.engine.runner import (
    RESUMABLE_LOOPS,
    TRAINING_HOOKS,
    ExactResumeRunner,
    add_training_guards,
)

from cluster_runs import alive, alive_after
from helpers import EXIT_PROBE_ENV, ROOT, free_port, repo_config


class RandomDataset:
    """Each item draws from the global generators, as random transforms do."""

    def __init__(self, n=12):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (int(i), random.random(), float(np.random.rand()), float(torch.rand(1)))


# ----------------------------------------------------------------------------- the data state
class CountingDataset(RandomDataset):
    """Records in a shared file which items were loaded (by any process)."""

    def __init__(self, n, record):
        super().__init__(n)
        self.record = record

    def __getitem__(self, i):
        with open(self.record, 'a') as f:
            f.write(f'{int(i)}\n')
        return super().__getitem__(i)


def _stateful_loader(dataset, sampler, num_workers, persistent, batch_sampler=None):
    return StatefulDataLoader(
        WorkerRandomState(dataset),
        batch_sampler=SkippingBatchSampler(batch_sampler or BatchSampler(sampler, 3, False)),
        num_workers=num_workers, persistent_workers=persistent, collate_fn=lambda b: b,
        generator=torch.Generator().manual_seed(5), snapshot_every_n_steps=1)


def _epochs(loader, sampler, first, last, stop=None):
    """Batches of epochs first..last; with ``stop=(epoch, batch)`` the run ends after that
    batch and returns the data state and the generators (what ExactResumeHook saves)."""
    out = []
    for epoch in range(first, last + 1):
        sampler.set_epoch(epoch)
        for number, batch in enumerate(loader):
            out.append(batch)
            if (epoch, number) == stop:
                return out, (data_state(loader), capture_random_states())
    return out, None


@pytest.mark.parametrize('workers,persistent', [(2, True), (3, False), (0, False)],
                         ids=['2 persistent workers', '3 workers', 'no workers'])
@pytest.mark.parametrize('stop', [(0, 1), (0, 4), (1, 2)],
                         ids=['mid-epoch', "an epoch's end", 'second epoch'])
def test_a_restored_loader_continues_with_the_same_batches_and_augmentations(
        tmp_path, workers, persistent, stop):
    """The uninterrupted run against one stopped after ``stop`` and continued by a new loader
    from the saved state (new workers, the main process's generators elsewhere meanwhile),
    over three epochs of 5 batches. Items draw from the generators of whichever process loads
    them, as random transforms do."""
    dataset = CountingDataset(14, tmp_path / 'loaded.txt')

    def make():
        sampler = DefaultSampler(dataset, shuffle=True, seed=1)
        return _stateful_loader(dataset, sampler, workers, persistent), sampler

    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    loader, sampler = make()
    full, _ = _epochs(loader, sampler, 0, 2)
    assert len(full) == 15 and full[:5] != full[5:10]  # another epoch, other draws
    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    loader, sampler = make()
    before, (state, generators) = _epochs(loader, sampler, 0, 2, stop=stop)
    del loader
    torch.manual_seed(99), random.random(), np.random.rand()  # whatever happens meanwhile

    loader, sampler = make()
    (tmp_path / 'loaded.txt').unlink()
    epoch, batch = stop
    restore_random_states(generators)  # ExactResumeHook, at the resumed epoch's start
    sampler.set_epoch(epoch)  # MMEngine's DistSamplerSeedHook, then
    start_loader_at(loader, batch + 1, state)  # the loops, with the saved state
    after, _ = _epochs(loader, sampler, epoch, 2)  # the stopped epoch's rest (maybe none)
    assert before + after == full
    # The batches before the stop were not loaded again, only the ones after it.
    loaded = [int(i) for i in (tmp_path / 'loaded.txt').read_text().split()]
    assert sorted(loaded) == sorted(item[0] for b in after for item in b)


def test_the_data_state_loads_with_safe_unpickling(tmp_path):
    dataset = RandomDataset(12)
    sampler = DefaultSampler(dataset, shuffle=True, seed=1)
    loader = _stateful_loader(dataset, sampler, 2, True)
    _, (state, _) = _epochs(loader, sampler, 0, 0, stop=(0, 1))
    torch.save(dict(resume_state=dict(data_states=[state])), tmp_path / 'c.pth')
    loaded = torch.load(tmp_path / 'c.pth', weights_only=True)['resume_state']['data_states'][0]
    assert loaded['num_workers'] == 2 and torch.equal(loaded['generator'], state['generator'])


def test_a_skip_starts_at_a_batch_drawing_only_indices(tmp_path):
    """The fallback where no saved state fits (another number of processes or workers)."""
    dataset = CountingDataset(14, tmp_path / 'loaded.txt')
    sampler = DefaultSampler(dataset, shuffle=True, seed=2)
    loader = _stateful_loader(dataset, sampler, 2, True)
    full = [[item[0] for item in batch] for batch in loader]
    (tmp_path / 'loaded.txt').unlink()
    start_loader_at(loader, 2)
    assert [[item[0] for item in batch] for batch in loader] == full[2:]
    assert sorted(int(i) for i in (tmp_path / 'loaded.txt').read_text().split()) == \
        sorted(i for batch in full[2:] for i in batch)  # the skipped batches were not loaded
    assert [[item[0] for item in batch] for batch in loader] == full  # the skip applies once
    with pytest.raises(ValueError, match='must be >= 0'):
        loader.batch_sampler.skip_next(-1)


@pytest.mark.parametrize('workers', [2, 0])
def test_an_infinite_stream_resumes_at_the_same_batches_and_augmentations(workers):
    """MMEngine's iteration-based loop: its InfiniteSampler continues one stream across
    iterators, and the loop makes an iterator before it knows where to start (held: it must
    draw nothing). Restored from the state after 4 batches, or skipped to batch 4."""
    from mmengine.runner.loops import _InfiniteDataloaderIterator

    dataset = RandomDataset(5)

    def batches(start, count, state=None):
        loader = _stateful_loader(dataset, None, workers, workers > 0, batch_sampler=BatchSampler(
            InfiniteSampler(dataset, seed=3), 2, False))
        loader.batch_sampler.hold()
        _InfiniteDataloaderIterator(loader)  # what MMEngine's __init__ makes
        start_loader_at(loader, start, state)
        stream = _InfiniteDataloaderIterator(loader)
        return [next(stream) for _ in range(count)], loader

    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    full, _ = batches(0, 7)
    torch.manual_seed(0), random.seed(0), np.random.seed(0)
    first, loader = batches(0, 4)
    state, generators = data_state(loader), capture_random_states()
    restore_random_states(generators)
    assert batches(4, 3, state)[0] == full[4:]
    skipped, _ = batches(4, 3)
    assert [[item[0] for item in b] for b in skipped] == [[item[0] for item in b]
                                                           for b in full[4:]]


def test_bucketing_batch_samplers_are_skipped_through_their_own_batches():
    from mmdet.datasets.samplers import AspectRatioBatchSampler

    class Shapes(RandomDataset):
        def get_data_info(self, i):
            return dict(width=100 + 50 * (i % 3 == 0), height=100)

    dataset = Shapes(16)
    make = lambda: SkippingBatchSampler(  # noqa: E731
        AspectRatioBatchSampler(DefaultSampler(dataset, shuffle=True, seed=0), 3))
    full = list(make())
    started = make()
    started.skip_next(2)
    assert list(started) == full[2:] and len(full) == len(started)


# ----------------------------------------------------------------------------- data workers
ORPHAN_PARENT = textwrap.dedent('''
    import functools, os, sys, time
    import torch
    from mmengine.registry import FUNCTIONS
    from torch.utils.data import DataLoader
    import cvt_mm  # noqa
    from cvt_mm.engine.workers import guarded_worker_init_cfg

    class Slow:
        def __len__(self): return 10**6
        def __getitem__(self, i):
            time.sleep(0.01)
            return torch.zeros(1000)

    if __name__ == '__main__':  # spawn and forkserver workers import this file
        cfg = guarded_worker_init_cfg()  # what the training loops put in the config
        worker_init_fn = functools.partial(FUNCTIONS.get(cfg.pop('type')), **cfg)  # MMEngine
        loader = DataLoader(Slow(), batch_size=4, num_workers=2, persistent_workers=True,
                            worker_init_fn=worker_init_fn,
                            multiprocessing_context=sys.argv[1] if len(sys.argv) > 1 else None)
        it = iter(loader)
        next(it)
        print(' '.join(str(w.pid) for w in it._workers), flush=True)
        time.sleep(600)
''')


def _ignores_sigterm(pid):
    with open(f'/proc/{pid}/status') as f:
        mask = next(line.split()[1] for line in f if line.startswith('SigIgn:'))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG is Linux')
@pytest.mark.parametrize('start_method', ['fork', 'forkserver', 'spawn'])
def test_data_workers_die_with_a_killed_training_process(tmp_path, start_method):
    """Under forkserver a worker's parent is the fork server, not the training process; the
    workers must still run, and still die with the training process."""
    script = tmp_path / 'parent.py'
    script.write_text(ORPHAN_PARENT)
    proc = subprocess.Popen([sys.executable, str(script), start_method], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        line = proc.stdout.readline()
        workers = [int(p) for p in line.split()]
        assert len(workers) == 2, (proc.kill(), proc.communicate()[1][-2000:])
        assert all(alive(w) for w in workers)
        # A spawned worker may still be importing when the first batch arrives from another.
        deadline = time.time() + 60
        while not all(_ignores_sigterm(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        # Scheduler signals reach the workers too; they leave them to the training process.
        for w in workers:
            os.kill(w, signal.SIGTERM)
            os.kill(w, signal.SIGUSR1)
        time.sleep(0.5)
        assert all(alive(w) for w in workers)
    finally:
        proc.kill()  # SIGKILL, as the kernel's OOM killer
        proc.wait()
    assert not alive_after(workers, 10)


def test_a_process_with_guarded_workers_still_exits_by_itself():
    """Guarded workers ignore SIGTERM, which is how Python ends daemonic children at exit:
    the exit must not wait for them forever."""
    script = ORPHAN_PARENT.replace('time.sleep(600)', 'sys.exit(3)')
    proc = subprocess.run([sys.executable, '-c', script, 'fork'], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert not any(alive(int(p)) for p in proc.stdout.split())


# A stand-in for torchrun: its child, a "rank", calls stop_with_launcher and reports the
# signal it then receives (tests/soak.py found ranks training on after a SIGKILLed torchrun).
LAUNCHER = """
import os, subprocess, sys, time
rank = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=sys.stderr, env=dict(
    os.environ, TORCHELASTIC_RUN_ID='test', CVT_MM_LAUNCHER_PID=str(os.getpid())))
print(rank.pid, flush=True)
time.sleep(600)
"""
RANK = """
import signal, sys, time
from cvt_mm.apis.launch import stop_with_launcher
def stop(signum, frame):
    print(signal.Signals(signum).name, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
stop_with_launcher()
print('ready', flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG is Linux')
def test_a_rank_receives_sigterm_when_its_launcher_is_killed(tmp_path):
    """SIGKILL of torchrun (the moment tests/soak.py hit): its ranks get SIGTERM, the preemption
    path, instead of training on beside the job resumed in their work dir."""
    out = tmp_path / 'rank.out'
    with open(out, 'w') as f:
        launcher = subprocess.Popen([sys.executable, '-c', LAUNCHER, RANK], stdout=subprocess.PIPE,
                                    stderr=f, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    rank = int(launcher.stdout.readline())
    try:
        deadline = time.time() + 60
        while 'ready' not in out.read_text() and time.time() < deadline:
            time.sleep(0.05)
        assert 'ready' in out.read_text(), out.read_text()[-2000:]
    finally:
        launcher.kill()
        launcher.wait()
    if alive_after([rank], 10):  # the failure this test guards: leave no process behind
        os.kill(rank, signal.SIGKILL)
        raise AssertionError('the rank outlived its killed launcher')
    assert out.read_text().splitlines()[-1] == 'SIGTERM'


def test_a_rank_whose_launcher_has_already_died_does_not_start():
    """The launcher killed before its rank asked to die with it: the rank's parent is then
    another process than the one tools/dist_train.sh named."""
    proc = subprocess.run([sys.executable, '-c', RANK], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT,
                                               TORCHELASTIC_RUN_ID='test',
                                               CVT_MM_LAUNCHER_PID=str(2 ** 22 + 1)))
    assert proc.returncode == 1 and 'ready' not in proc.stdout
    assert f'torchrun (pid {2 ** 22 + 1}) ended before this rank started training' in proc.stderr


def test_a_preempted_run_ends_its_persistent_workers_at_once():
    """A preempted run's loader, left to garbage collection, kept its workers 10 s: they
    missed their stop message and ignore SIGTERM (found by tests/soak.py). The preemption
    path ends them through the loader before it raises (PreemptionHook._stop)."""
    script = ORPHAN_PARENT.replace('time.sleep(600)', textwrap.dedent('''
        from cvt_mm.engine.workers import end_workers
        end_workers(loader)
        print(' '.join(str(w.pid) for w in it._workers if w.is_alive()), flush=True)
        ''').replace('\n', '\n    '))
    proc = subprocess.run([sys.executable, '-c', script, 'fork'], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    started, left = proc.stdout.splitlines()
    assert len(started.split()) == 2 and left == ''


# ----------------------------------------------------------------------------- slurm
def test_the_first_host_of_slurm_node_lists():
    assert first_slurm_host('node7') == 'node7'
    assert first_slurm_host('gpu-a[07-09,12],gpu-b3') == 'gpu-a07'
    assert first_slurm_host('rack[2-3]-gpu[5,8]') == 'rack2-gpu5'
    assert first_slurm_host('a1,b[1-2]') == 'a1'
    with pytest.raises(ValueError, match="node list 'gpu\\[1-2'"):
        first_slurm_host('gpu[1-2')


def test_the_torch_environment_of_a_slurm_task():
    env = dict(SLURM_PROCID='5', SLURM_NTASKS='16', SLURM_LOCALID='1',
               SLURM_NODELIST='gpu[03-04]', SLURM_JOB_ID='123456')
    assert slurm_environment(env) == dict(RANK='5', WORLD_SIZE='16', LOCAL_RANK='1',
                                          MASTER_ADDR='gpu03', MASTER_PORT='23456')
    env.update(MASTER_ADDR='10.0.0.1', MASTER_PORT='29999')
    assert slurm_environment(env)['MASTER_ADDR'] == '10.0.0.1'
    assert slurm_environment(env)['MASTER_PORT'] == '29999'
    with pytest.raises(ValueError, match='SLURM_PROCID, SLURM_NTASKS not set'):
        slurm_environment(dict(SLURM_NODELIST='x'))


# ------------------------------------------------------- tools/slurm_sbatch.sh's relay and wait
SBATCH_SCRIPT = os.path.join(ROOT, 'tools', 'slurm_sbatch.sh')
# Stand-ins for slurm's commands (slurm's own are tested in test_slurm.py): each records its
# call in `calls`; srun marks when it has started and when it exits.
FAKE_SRUN_EXITS = '\n'.join([
    ': > "$DIR/started"', '"$SLEEP" 1', ': > "$DIR/exiting"', 'exit "$SRUN_EXIT"'])
FAKE_SRUN_STOPS_ON_USR1 = '\n'.join([
    """trap 'echo "srun: SIGUSR1, forwarded to the tasks" >> "$DIR/calls"; exit 75' USR1""",
    'echo $$ > "$DIR/started"', 'while :; do "$SLEEP" 0.05; done'])
SLOW_SCANCEL = '\n'.join([  # answers once srun has exited during it
    'echo "scancel $*" >> "$DIR/calls"',
    'until [ -e "$DIR/exiting" ]; do "$SLEEP" 0.05; done', '"$SLEEP" 0.5'])


def _run_batch_script(tmp_path, srun, scancel=None, signal_=None, srun_exit=75,
                      job_state='RUNNING'):
    """tools/slurm_sbatch.sh as sbatch runs it, with PATH holding only setsid and the
    stand-ins for srun, scontrol (``scontrol show job`` answers ``job_state``) and (unless
    None) scancel; ``signal_`` is sent to the script once srun has started. Returns (exit
    status, output, the calls made)."""
    import shutil
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    os.symlink(shutil.which('setsid'), bin_dir / 'setsid')
    stand_ins = {'srun': srun, 'scancel': scancel, 'scontrol': '\n'.join([
        'echo "scontrol $*" >> "$DIR/calls"',
        '[ "$1" != show ] || echo "JobId=42 JobName=slurm_sbatch.sh JobState=$JOB_STATE"'])}
    for name, body in stand_ins.items():
        if body is not None:
            (bin_dir / name).write_text(f'#!{shutil.which("bash")}\n{body}\n')
            (bin_dir / name).chmod(0o755)
    env = dict(PATH=str(bin_dir), DIR=str(tmp_path), SLEEP=shutil.which('sleep'),
               SRUN_EXIT=str(srun_exit), SLURM_JOB_ID='42', SLURM_SUBMIT_DIR=ROOT,
               JOB_STATE=job_state)
    proc = subprocess.Popen([shutil.which('bash'), SBATCH_SCRIPT, 'config.py', 'work'],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while not (tmp_path / 'started').exists() and proc.poll() is None:
            assert time.time() < deadline, 'the stand-in srun did not start'
            time.sleep(0.02)
        if signal_ is not None:
            proc.send_signal(signal_)
        output, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        started = tmp_path / 'started'
        pid = started.read_text().strip() if started.exists() else ''
        if pid:  # the stand-in srun runs in a session of its own
            subprocess.run(['kill', '-9', pid], capture_output=True)
    calls = (tmp_path / 'calls').read_text().splitlines() if (tmp_path / 'calls').exists() \
        else []
    return proc.returncode, output, calls


SHOW_JOB = 'scontrol show job 42 --oneliner'


def test_the_batch_script_does_not_requeue_a_job_that_slurm_is_ending(tmp_path):
    """A plain ``scancel JOB`` (or a time limit without --signal) signals every process:
    the tasks checkpoint and exit 75 while the job is COMPLETING. Requeued, the cancelled
    job would come back (test_slurm.py saw it); the script says so and leaves it ended."""
    status, output, calls = _run_batch_script(tmp_path, FAKE_SRUN_EXITS, SLOW_SCANCEL,
                                              signal.SIGTERM, job_state='COMPLETING')
    assert (status, calls) == (75, ['scancel --signal=TERM 42', SHOW_JOB]), output
    assert 'slurm is ending job 42 (COMPLETING: scancel, or a time limit without --signal), ' \
           'so it is not requeued. Continue from the checkpoint with: sbatch ... ' \
           'tools/slurm_sbatch.sh config.py work --resume' in output


def test_the_batch_script_requeues_when_srun_ends_while_its_relay_runs(tmp_path):
    """srun exits with 75 (the tasks checkpointed on their own signal) while the trap's
    scancel still runs: bash reaps srun during the trap, and the script must still take
    srun's status and requeue, not end with the trap's 138."""
    status, output, calls = _run_batch_script(tmp_path, FAKE_SRUN_EXITS, SLOW_SCANCEL,
                                              signal.SIGUSR1)
    assert (status, calls) == (75, ['scancel --signal=USR1 42', SHOW_JOB,
                                    'scontrol requeue 42']), output
    assert 'requeueing job 42' in output


def test_the_batch_script_takes_sruns_own_status_above_128(tmp_path):
    """No signal, srun itself killed (137): the script ends with it and does not requeue."""
    status, output, calls = _run_batch_script(tmp_path, FAKE_SRUN_EXITS, srun_exit=137)
    assert (status, calls) == (137, []), output


def test_without_scancel_the_batch_script_stops_the_tasks_through_srun(tmp_path):
    """No scancel on PATH: a SIGTERM to the batch shell goes to srun as SIGUSR1, which srun
    forwards to its tasks (test_slurm.py checks that with slurm's srun)."""
    status, output, calls = _run_batch_script(tmp_path, FAKE_SRUN_STOPS_ON_USR1,
                                              signal_=signal.SIGTERM)
    assert (status, calls) == (75, ['srun: SIGUSR1, forwarded to the tasks', SHOW_JOB,
                                    'scontrol requeue 42']), output
    assert 'slurm_sbatch: SIGTERM, no scancel on PATH: passed on to the tasks as SIGUSR1 by ' \
           'srun' in output


# ----------------------------------------------------------------------------- restarts
def test_restarts_are_told_by_torchrun_and_slurm_together(monkeypatch, capsys):
    for name in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT', 'RANK'):
        monkeypatch.delenv(name, raising=False)
    assert restart_count() == 0
    monkeypatch.setenv('SLURM_RESTART_COUNT', '2')
    assert restart_count() == 2
    # torchrun started by a requeued job counts from 0: the requeue is not hidden by it.
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '0')
    assert restart_count() == 2
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')
    assert restart_count() == 3
    choose_resume(Config(dict(work_dir='/nonexistent')), None)
    assert capsys.readouterr().out.startswith(
        'slurm requeue 2, after a preemption, a time limit or a failure and torchrun restart 1 '
        'of')


def _training_checkpoint(path, iteration, epoch=0):
    torch.save({'state_dict': {'w': torch.ones(1)}, 'optimizer': {},
                'meta': {'iter': iteration, 'epoch': epoch}}, path)


def test_a_restart_resumes_from_the_newest_checkpoint_and_says_which(tmp_path, monkeypatch,
                                                                     capsys):
    """Whatever the command line asked for: the failed attempt may have written newer ones."""
    for name in ('SLURM_RESTART_COUNT', 'RANK'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')
    monkeypatch.setenv('TORCHELASTIC_MAX_RESTARTS', '3')
    cfg = Config(dict(work_dir=str(tmp_path)))
    choose_resume(cfg, None)
    assert capsys.readouterr().out == (f'torchrun restart 1 of 3, after a process of the job '
                                       f'failed: no checkpoint in {tmp_path}: training starts '
                                       'again at iteration 1\n')
    assert not cfg.resume
    _training_checkpoint(tmp_path / 'iter_40.pth', 40, 1)
    choose_resume(cfg, str(tmp_path / 'iter_40.pth.old'))
    assert capsys.readouterr().out == (f'torchrun restart 1 of 3, after a process of the job '
                                       f'failed: resuming from {tmp_path}/iter_40.pth '
                                       '(iteration 40, epoch 1)\n')
    assert cfg.resume and cfg.load_from == str(tmp_path / 'iter_40.pth')


def test_a_restart_picks_the_newest_write_when_epoch_and_iteration_names_mix(tmp_path):
    _training_checkpoint(tmp_path / 'iter_1800.pth', 1800, 2)  # a preemption checkpoint...
    time.sleep(0.01)
    _training_checkpoint(tmp_path / 'epoch_3.pth', 2250, 3)  # ...then the next epoch's
    assert find_resumable_checkpoint(str(tmp_path)) == str(tmp_path / 'epoch_3.pth')


# ----------------------------------------------------------------------------- tools/train.py
def test_every_training_config_names_the_runner_loop_and_hooks_that_run():
    """So that MMDetection's and MMSegmentation's own tools, and mim, train them as
    tools/train.py does; and the loop and the training hooks that run are the ones the
    printed config shows (configs/_base_/training_guards.py)."""
    paths = sorted(glob.glob(os.path.join(ROOT, 'configs', '*.py'))
                   + glob.glob(os.path.join(ROOT, 'configs', 'demo', '*.py')))
    missing, loops, hooks = [], {}, {}
    for path in paths:
        cfg = repo_config(path)
        if not cfg.get('train_cfg'):
            continue
        name = os.path.relpath(path, ROOT)
        if cfg.get('runner_type') != 'ExactResumeRunner':
            missing.append(name)
        loops[name] = cfg.train_cfg.get('type')
        hooks[name] = [hook['type'] for hook in cfg.get('custom_hooks', [])]
    assert len(paths) > 40 and missing == []
    assert {k: v for k, v in loops.items() if v not in RESUMABLE_LOOPS.values()} == {}
    assert {k: v for k, v in hooks.items() if v[:len(TRAINING_HOOKS)] != list(TRAINING_HOOKS)} \
        == {}


def test_unknown_signal_names_are_refused():
    with pytest.raises(ValueError, match="unknown signal 'SIGFOO'.*'SIGUSR1'"):
        PreemptionHook(signals=('SIGTERM', 'SIGFOO'))


# ----------------------------------------------------------------------------- dead peers
DEAD_PEER = textwrap.dedent('''
    import os, sys, time, types
    import torch.distributed as dist
    import cvt_mm  # noqa
    from cvt_mm.engine.hooks import PreemptionHook

    dist.init_process_group('gloo')
    if dist.get_rank() == 1:
        time.sleep(float(sys.argv[1]))  # alive but never at the boundary, or gone
        os._exit(0)
    hook = PreemptionHook(agree_timeout=float(sys.argv[3]))
    hook.requested = 'SIGTERM'  # what torchrun sends the survivors when a rank died
    real_exit = os._exit

    def timed_exit(code):  # the hook gives up through os._exit: first, how long it waited
        print(f'gave up after {time.monotonic() - started:.2f} s', flush=True)
        real_exit(code)

    os._exit = timed_exit
    started = time.monotonic()
    hook.after_train_iter(types.SimpleNamespace(work_dir=sys.argv[2]), batch_idx=0)
    print('returned', flush=True)
''')
AGREE_TIMEOUT = 3  # seconds; the stuck peer stays 20 times as long


@pytest.mark.parametrize('peer_lifetime', [0, 60], ids=['peer-exited', 'peer-stuck'])
def test_a_stop_that_cannot_be_agreed_exits_without_waiting_or_writing(tmp_path,
                                                                       peer_lifetime):
    """The wait is timed by the surviving process itself, from the stop request to its exit:
    the start of the two interpreters (torch, cvt_mm, the process group), which took 32 s on
    a 2-core machine shared with two other jobs, is no part of it."""
    env = dict(os.environ, PYTHONPATH=ROOT, MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(free_port()), WORLD_SIZE='2')
    procs = [subprocess.Popen([sys.executable, '-c', DEAD_PEER, str(peer_lifetime),
                               str(tmp_path), str(AGREE_TIMEOUT)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:
        out, err = procs[0].communicate(timeout=300)  # only against a hang: timed below
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
    assert procs[0].returncode == STOPPED_EXIT_CODE, err[-2000:]
    assert 'returned' not in out and 'exiting without a checkpoint' in out + err
    assert list(tmp_path.iterdir()) == []
    waited = re.search(r'gave up after ([\d.]+) s', out)
    assert waited, out[-2000:]
    # Gone by the agree timeout at the latest (twice it: room for a loaded machine to
    # schedule the exit), not when the stuck peer is (after peer_lifetime), nor never.
    assert float(waited[1]) < 2 * AGREE_TIMEOUT, f'{waited[0]}; agree_timeout={AGREE_TIMEOUT}'


# ----------------------------------------------------------------------------- the boundary
class SignalBetweenReads(PreemptionHook):
    """A stop signal that lands while the boundary is being decided: ``requested`` is None
    at its first read and set from then on."""
    reads = 0

    @property
    def requested(self):
        self.reads += 1
        return None if self.reads == 1 else 'SIGTERM'

    @requested.setter
    def requested(self, value):
        pass


def test_a_rank_stops_exactly_when_the_flag_it_sent_says_so(monkeypatch):
    from cvt_mm.engine.hooks import preemption_hook as preemption
    sent = []

    def all_reduce(tensor, op=None, group=None, async_op=False):
        sent.append(int(tensor.item()))  # the peer sends 0: the maximum is this rank's flag
        return types.SimpleNamespace(wait=lambda timeout=None: True)  # answered at once

    monkeypatch.setattr(preemption, 'get_dist_info', lambda: (0, 2))
    monkeypatch.setattr(torch.distributed, 'all_reduce', all_reduce)
    monkeypatch.setattr(torch.distributed, 'get_backend', lambda group=None: 'gloo')
    hook = SignalBetweenReads()
    first = hook._agree()
    # The peer saw the flag sent and trains on; stopping here alone would leave it waiting
    # in a collective this rank never joins.
    assert first is bool(sent[0]), f'sent {sent[0]} to the other ranks but decided {first}'
    assert hook._agree() is True and sent[-1] == 1  # the signal is answered at the next one


SIDE_GROUP = textwrap.dedent('''
    import json, os, sys, types
    import torch
    import torch.distributed as dist
    import cvt_mm  # noqa
    from cvt_mm.engine.hooks import FiniteLossHook
    from cvt_mm.apis.launch import finish_distributed
    from cvt_mm.engine.hooks import PreemptionHook

    dist.init_process_group('gloo')
    world = dist.group.WORLD
    real_backend, real_all_reduce, real_new_group = (dist.get_backend, dist.all_reduce,
                                                     dist.new_group)
    # The default group stands for NCCL, whose all-reduce returns before the peers answer.
    dist.get_backend = lambda group=None: ('nccl' if group is None or group is world
                                           else real_backend(group))
    calls = dict(default=0, side=0, new_group=0)

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls['default' if group is None or group is world else 'side'] += 1
        return real_all_reduce(tensor, op, group, async_op)

    def new_group(*args, **kwargs):
        calls['new_group'] += 1
        return real_new_group(*args, **kwargs)

    dist.all_reduce, dist.new_group = all_reduce, new_group
    wrapper = types.SimpleNamespace(update_params=lambda loss: None,
                                    should_update=lambda: True)
    runner = types.SimpleNamespace(iter=0, epoch=0, work_dir='.', optim_wrapper=wrapper)
    finite, stop = FiniteLossHook(), PreemptionHook()
    for hook in (finite, stop):
        hook.before_train(runner)
    iterations = int(sys.argv[1])
    for i in range(iterations):
        runner.iter = i
        finite.before_train_iter(runner, i, {})
        wrapper.update_params(torch.tensor(1.0))  # the loss check, before backward
        stop.after_train_iter(runner, i)  # the stop flag, after the step
    if dist.get_rank() == 1:
        stop.requested = 'SIGTERM'
    agreed = stop._agree()
    dist.get_backend, dist.all_reduce = real_backend, real_all_reduce
    dist.new_group = real_new_group
    del world
    finish_distributed()  # as tools/train.py ends
    threads = [open(f'/proc/self/task/{task}/comm').read().strip()
               for task in os.listdir('/proc/self/task')]
    print(json.dumps(dict(calls, agreed=agreed, threads=sorted(threads))), flush=True)
''')


def test_the_per_iteration_flags_travel_on_a_gloo_group_created_once(tmp_path):
    """Under NCCL an all-reduce returns once queued, so a timed wait on it cannot see a dead
    peer: the flags must go through a gloo group beside the default one."""
    import json

    env = dict(os.environ, PYTHONPATH=ROOT, MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(free_port()), WORLD_SIZE='2', OMP_NUM_THREADS='1')
    procs = [subprocess.Popen([sys.executable, '-c', SIDE_GROUP, '3'], cwd=tmp_path,
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    for out, _ in outputs:
        # Two flags per iteration (the loss check and the stop), plus the final agreement;
        # after finish_distributed no group is left alive with gloo's threads (they aborted
        # processes at interpreter shutdown, exit -6, after runs that had finished).
        assert json.loads(out) == dict(default=0, side=2 * 3 + 1, new_group=1, agreed=True,
                                       threads=['python'])


FINISHED_RUNNER = textwrap.dedent('''
    import json, os, sys, types
    import torch
    import torch.distributed as dist
    from cvt_mm.apis.launch import finish_distributed
    from sitecustomize import gloo_threads  # tests/exit_probe, on the PYTHONPATH

    def train():
        # A runner as MMEngine's: in reference cycles, with the model wrapped by DDP.
        runner = types.SimpleNamespace()
        runner.model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        runner.itself = runner
        runner.model(torch.randn(2, 4)).sum().backward()

    dist.init_process_group('gloo')
    train()
    during = gloo_threads()
    finish_distributed()  # as tools/train.py ends
    print(json.dumps(dict(during=during, after=gloo_threads())), flush=True)
''')


def test_finish_distributed_ends_gloo_threads_a_finished_runner_still_held(tmp_path):
    """A finished runner lives on in reference cycles and its DDP wrapper holds the default
    group: destroy_process_group alone left gloo's threads running into interpreter shutdown,
    where a rank sometimes aborted (exit -6) after a run that had finished."""
    import json

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, EXIT_PROBE_ENV['PYTHONPATH']]),
               MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()), WORLD_SIZE='2',
               OMP_NUM_THREADS='1')
    procs = [subprocess.Popen([sys.executable, '-c', FINISHED_RUNNER], cwd=tmp_path,
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        threads = json.loads(out)
        assert threads['during'], 'no gloo thread while training: the check would prove nothing'
        assert threads['after'] == [], threads


# ----------------------------------------------------------------------------- in-process runs
class ToyData:
    """Samples with a random augmentation (noise drawn from the loading process's generator)."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return dict(inputs=torch.full((4, ), i / 24) + torch.randn(4),
                    labels=torch.tensor([float(i % 3)]))


def _toy_model():
    from mmengine.model import BaseModel

    class ToyModel(BaseModel):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)
            self.drop = torch.nn.Dropout(0.5)  # draws from the training process's generator

        def forward(self, inputs, labels=None, mode='tensor'):
            out = self.linear(self.drop(torch.stack(inputs)))
            if mode == 'loss':
                return dict(loss=((out - torch.stack(labels)) ** 2).mean())
            return out

    return ToyModel()


class Recorder(Hook):
    """What each iteration trains on: its inputs (batches and augmentations) and the state
    of the generator its random draws come from, after any restore."""
    priority = 'LOWEST'

    def __init__(self, log):
        self.log = log

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.log.append((runner.iter + 1, torch.stack(data_batch['inputs']).tolist(),
                         torch.get_rng_state().tolist()))


class SignalAt(Hook):
    """Sends SIGUSR1 to this process at the start of iteration ``iteration``."""
    priority = 'LOWEST'

    def __init__(self, iteration):
        self.iteration = iteration

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.iteration:
            os.kill(os.getpid(), signal.SIGUSR1)


def _toy_runner(work_dir, name, hooks=(), accumulative_counts=2, max_iters=8, resume=None,
                signals=('SIGUSR1', ), max_epochs=None, checkpoint=None, num_workers=0,
                cfg=None):
    """A run of ``tools/train.py``'s pieces: the resumable loop (iteration-based, or
    epoch-based with ``max_epochs``; 12 iterations per epoch), exact resume, the stop on
    ``signals``; one optimizer step every ``accumulative_counts`` iterations; ``checkpoint``:
    the CheckpointHook's settings."""
    torch.manual_seed(0)  # the initial weights
    by_epoch = max_epochs is not None
    runner = ExactResumeRunner(  # the runner gives the loop the checkpoint's position back
        model=_toy_model(), work_dir=str(work_dir), experiment_name=name,
        train_dataloader=dict(dataset=ToyData(), batch_size=2, num_workers=num_workers,
                              sampler=dict(type='DefaultSampler' if by_epoch else
                                           'InfiniteSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9),
                           accumulative_counts=accumulative_counts),
        train_cfg=dict(type='ResumableEpochBasedTrainLoop', max_epochs=max_epochs) if by_epoch
        else dict(type='ResumableIterBasedTrainLoop', max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', **(checkpoint or dict(
            by_epoch=False, interval=100)))),
        custom_hooks=[dict(type='ExactResumeHook'),
                      dict(type='PreemptionHook', signals=signals)],
        randomness=dict(seed=0), resume=resume is not None, load_from=resume,
        default_scope='mmengine', cfg=cfg)
    for hook in hooks:
        runner.register_hook(hook)
    return runner


def test_the_runner_formats_its_config_once_and_again_only_after_a_change(tmp_path,
                                                                          monkeypatch):
    """MMEngine formats the config with yapf when the runner starts and at every checkpoint
    save; the runner's RunConfig formats it once, then again only after the config changed,
    and every checkpoint holds MMEngine's text of the config as it was."""
    import mmengine.config.config as config_module

    from cvt_mm.engine.runner import RunConfig

    formatted = []
    format_code = config_module.FormatCode
    monkeypatch.setattr(config_module, 'FormatCode',
                        lambda *args, **kwargs: formatted.append(1) or format_code(*args,
                                                                                   **kwargs))
    runner = _toy_runner(tmp_path, 'formatted', max_iters=4, cfg=Config(dict(note='before')),
                         checkpoint=dict(by_epoch=False, interval=1))
    runner.train()
    assert isinstance(runner.cfg, RunConfig) and len(formatted) == 1
    runner.cfg.note = 'after'
    runner.save_checkpoint(str(tmp_path), 'changed.pth')
    runner.save_checkpoint(str(tmp_path), 'unchanged.pth')
    assert len(formatted) == 2
    texts = {name: torch.load(tmp_path / name, weights_only=False)['meta']['cfg']
             for name in ('iter_4.pth', 'changed.pth', 'unchanged.pth')}
    for name, note in (('iter_4.pth', 'before'), ('changed.pth', 'after'),
                       ('unchanged.pth', 'after')):
        runner.cfg.note = note
        assert texts[name] == Config(runner.cfg.to_dict()).pretty_text, name


def test_the_runner_adds_resumable_loops_and_the_training_hooks_when_it_trains(tmp_path):
    """MMEngine's short loop form and a hook the config lists itself (its settings kept);
    the guards are added once, when training starts, not to a runner that only tests."""
    from cvt_mm.engine.runner import ResumableEpochBasedTrainLoop

    runner = ExactResumeRunner(
        model=_toy_model(), work_dir=str(tmp_path), experiment_name=tmp_path.name,
        train_dataloader=dict(dataset=ToyData(), batch_size=12, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=True, max_epochs=1),
        custom_hooks=[dict(type='PreemptionHook', signals=('SIGUSR1', ))],
        randomness=dict(seed=0), default_scope='mmengine')
    assert not any(type(h).__name__ in ('ExactResumeHook', 'FiniteLossHook')
                   for h in runner.hooks)
    runner._test_dataloader = dict(num_workers=2)  # a test loader's config, not yet built
    add_training_guards(runner)  # what train() does first; a second time adds nothing
    runner.train()
    names = [type(h).__name__ for h in runner.hooks]
    assert all(names.count(name) == 1 for name in TRAINING_HOOKS)
    preemption = next(h for h in runner.hooks if type(h).__name__ == 'PreemptionHook')
    assert preemption.signals == ('SIGUSR1', )  # the config's own settings
    assert type(runner.train_loop) is ResumableEpochBasedTrainLoop
    assert runner._test_dataloader['worker_init_fn'] == dict(type='guard_data_worker',
                                                             seed=None)
    log = ''.join(p.read_text() for p in tmp_path.rglob('*.log'))
    assert "Training guards added (not in the config's custom_hooks): FiniteLossHook, " \
        'ExactResumeHook\n' in log


def test_the_preemption_hook_a_config_lists_answers_signals_when_training_only(tmp_path):
    """Our configs list PreemptionHook, so tools/test.py's runner registers it too: there
    nothing would answer a recorded SIGTERM, so the test run keeps the process's handlers (a
    TERM stops it as usual); training installs the hook's."""
    from mmengine.evaluator import BaseMetric

    seen = {}

    class HandlerAtTest(BaseMetric):
        def process(self, data_batch, data_samples):
            seen['test'] = signal.getsignal(signal.SIGTERM)

        def compute_metrics(self, results):
            return dict(handler_recorded=1.0)

    class HandlerAtTrain(Hook):
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            seen['train'] = signal.getsignal(signal.SIGTERM)

    loader = dict(dataset=ToyData(), batch_size=12, num_workers=0,
                  sampler=dict(type='DefaultSampler', shuffle=False))
    runner = ExactResumeRunner(
        model=_toy_model(), work_dir=str(tmp_path), experiment_name=tmp_path.name,
        train_dataloader=loader, test_dataloader=loader, test_cfg=dict(),
        test_evaluator=[HandlerAtTest()], optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(type='ResumableEpochBasedTrainLoop', max_epochs=1),
        custom_hooks=[dict(type='PreemptionHook'), HandlerAtTrain()],
        randomness=dict(seed=0), default_scope='mmengine')
    before = signal.getsignal(signal.SIGTERM)
    runner.test()
    assert seen['test'] is before
    runner.train()
    preemption = next(h for h in runner.hooks if isinstance(h, PreemptionHook))
    assert seen['train'] == preemption._on_signal
    assert signal.getsignal(signal.SIGTERM) is before  # given back after the run


# tools/train.py's process, on the toy run: a stop signal sent by a hook of the run at a
# moment around it, or at exit (after the exit probe, where a CI job's time-limit warning
# once landed and killed a finished slurm job).
STOP_AROUND_THE_RUN = """
import atexit, os, signal, sys
from mmengine.hooks import Hook
from cvt_mm.apis.launch import run_and_finish
from test_cluster_units import _toy_runner
moment, name, work_dir = sys.argv[1:]
stop = lambda: os.kill(os.getpid(), getattr(signal, name))

class StopAt(Hook):
    priority = 'HIGHEST' if moment == 'before_run' else 'LOWEST'  # before/after the hook's
    def before_run(self, runner):
        if moment == 'before_run':
            stop()
    def after_train(self, runner):  # after the last iteration: the final validation's place
        if moment == 'after_train':
            stop()
    def after_run(self, runner):
        if moment == 'after_run':
            stop()
            print('went on after the signal', flush=True)

if moment == 'exit':
    atexit.register(stop)
run_and_finish(lambda: _toy_runner(work_dir, 'stop', [StopAt()], max_iters=4,
                                   signals=('SIGTERM', 'SIGUSR1')).train())
"""


@pytest.mark.parametrize('moment, name, code', [
    ('before_run', 'SIGUSR1', -signal.SIGUSR1),  # nothing answers it yet: as by default
    ('after_train', 'SIGTERM', 0),  # recorded by PreemptionHook, and nothing left to answer
    ('after_run', 'SIGUSR1', 0),
    ('exit', 'SIGTERM', 0),
])
def test_a_stop_after_a_finished_training_lets_the_process_finish(tmp_path, moment, name,
                                                                   code):
    """A stop once training is over (its last checkpoint written) has nothing to save: the
    process finishes with exit code 0, where by default the signal would end it (a slurm job
    that ends within --signal=USR1@N of its time limit would be FAILED). Before the run the
    process's previous handling is kept."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.dirname(here), here]))
    proc = subprocess.run([sys.executable, '-c', STOP_AROUND_THE_RUN, moment, name,
                           str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    trained = (tmp_path / 'iter_4.pth').is_file()
    assert trained == (code == 0), os.listdir(tmp_path)
    if moment == 'after_run':
        assert 'went on after the signal' in proc.stdout
        assert f'[cvt_mm] {name} after training ended: nothing left to checkpoint; the ' \
            'process finishes' in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize('loop, by_epoch, error', [
    ('ResumableEpochBasedTrainLoop', True, None),
    ('ResumableIterBasedTrainLoop', False, None),
    ('ResumableEpochBasedTrainLoop', False, "by_epoch=False contradicts "
     "type='ResumableEpochBasedTrainLoop', which the config's base names; write "
     "train_cfg=dict(_delete_=True, type='ResumableIterBasedTrainLoop', ...)"),
])
def test_a_short_form_train_cfg_on_a_config_that_names_the_loop(tmp_path, loop, by_epoch, error):
    """A user's ``train_cfg=dict(by_epoch=True, ...)`` (MMPretrain's habit) merged onto our
    configs, which name the loop: a matching ``by_epoch`` trains, a contradicting one says
    what to write."""
    length = dict(max_epochs=1) if by_epoch else dict(max_iters=2)
    runner = ExactResumeRunner(
        model=_toy_model(), work_dir=str(tmp_path), experiment_name=tmp_path.name,
        train_dataloader=dict(dataset=ToyData(), batch_size=12, num_workers=0, sampler=dict(
            type='DefaultSampler' if by_epoch else 'InfiniteSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(type=loop, by_epoch=by_epoch, **length),
        randomness=dict(seed=0), default_scope='mmengine')
    if error:
        with pytest.raises(ValueError, match=re.escape(error)):
            runner.train()
        return
    runner.train()
    assert type(runner.train_loop).__name__ == loop
    assert runner.iter == runner.train_loop.max_iters == (len(ToyData()) // 12 if by_epoch else 2)


def test_resuming_with_another_number_of_data_workers_continues_at_the_batch_and_says_so(
        tmp_path):
    """The saved data state fits only the number of workers that wrote it: with another, the
    run continues at the same batch (indices skipped) and the log says it is not exact."""
    _toy_runner(tmp_path / 'a', f'{tmp_path.name}_a', max_iters=4, checkpoint=dict(
        by_epoch=False, interval=4)).train()
    resumed = []
    _toy_runner(tmp_path / 'b', f'{tmp_path.name}_b', [Recorder(resumed)], max_iters=6,
                num_workers=1, resume=str(tmp_path / 'a' / 'iter_4.pth')).train()
    log = ''.join(p.read_text() for p in (tmp_path / 'b').rglob('*.log'))
    assert 'Resuming a checkpoint written with 0 data workers per process with 1: training ' \
        'continues at the same batch' in log
    assert 'Resuming at iteration 5: the indices of the 4 batches' in log
    assert [iteration for iteration, _, _ in resumed] == [5, 6]


def test_a_stop_inside_gradient_accumulation_waits_for_the_optimizer_step(tmp_path):
    """With an optimizer step every 2 iterations, a signal in iteration 3 stops after
    iteration 4, where the step has used both halves of the gradient; the resumed run ends
    with the uninterrupted run's weights, having trained on the same batches with the same
    augmentations and random draws."""
    from cvt_mm.engine.hooks import TrainingPreempted
    full, interrupted = [], []
    _toy_runner(tmp_path / 'a', f'{tmp_path.name}_a', [Recorder(full)]).train()
    runner = _toy_runner(tmp_path / 'b', f'{tmp_path.name}_b',
                         [Recorder(interrupted), SignalAt(3)])
    with pytest.raises(TrainingPreempted) as stopped:
        runner.train()
    assert os.path.basename(stopped.value.checkpoint) == 'iter_4.pth'
    _toy_runner(tmp_path / 'b', f'{tmp_path.name}_b2', [Recorder(interrupted)],
                resume=stopped.value.checkpoint).train()
    assert [r[0] for r in interrupted] == [r[0] for r in full] == list(range(1, 9))
    assert interrupted == full  # batches, augmentations, generator states
    a = torch.load(tmp_path / 'a' / 'iter_8.pth', weights_only=False)['state_dict']
    b = torch.load(tmp_path / 'b' / 'iter_8.pth', weights_only=False)['state_dict']
    assert all(torch.equal(a[k], b[k]) for k in a)


def _checkpoints(folder):
    return sorted(p.name for p in folder.glob('*.pth'))


def test_the_preemption_checkpoint_counts_in_the_checkpoint_hooks_max_keep_ckpts(tmp_path):
    """Saved through CheckpointHook's own path, the preemption checkpoint is one of the
    checkpoints max_keep_ckpts bounds, and last_checkpoint points to it; before, it was
    written beside the hook and stayed for ever."""
    from cvt_mm.engine.hooks import TrainingPreempted
    hook = dict(by_epoch=False, interval=2, max_keep_ckpts=2)
    runner = _toy_runner(tmp_path, 'keep', [SignalAt(3)], accumulative_counts=1,
                         checkpoint=hook)
    with pytest.raises(TrainingPreempted) as stopped:
        runner.train()
    assert _checkpoints(tmp_path) == ['iter_2.pth', 'iter_3.pth']
    assert (tmp_path / 'last_checkpoint').read_text() == stopped.value.checkpoint
    _toy_runner(tmp_path, 'keep2', accumulative_counts=1, checkpoint=hook,
                resume=stopped.value.checkpoint).train()
    assert _checkpoints(tmp_path) == ['iter_6.pth', 'iter_8.pth']


def test_a_mid_epoch_preemption_checkpoint_goes_once_the_epoch_is_saved(tmp_path):
    """An epoch-based CheckpointHook cannot name a mid-epoch checkpoint: it is iter_N.pth,
    resumed from, and removed once the hook has saved a newer one (max_keep_ckpts > 0)."""
    from cvt_mm.engine.hooks import TrainingPreempted
    hook = dict(by_epoch=True, interval=1, max_keep_ckpts=1)
    runner = _toy_runner(tmp_path, 'epochs', [SignalAt(15)], accumulative_counts=1,
                         max_epochs=3, checkpoint=hook)
    with pytest.raises(TrainingPreempted) as stopped:
        runner.train()
    assert _checkpoints(tmp_path) == ['epoch_1.pth', 'iter_15.pth']
    assert (tmp_path / 'last_checkpoint').read_text() == stopped.value.checkpoint
    log = []
    _toy_runner(tmp_path, 'epochs2', [Recorder(log)], accumulative_counts=1, max_epochs=3,
                checkpoint=hook, resume=stopped.value.checkpoint).train()
    assert log[0][0] == 16  # resumed mid-epoch
    assert _checkpoints(tmp_path) == ['epoch_3.pth']


LATE_SIGTERM = textwrap.dedent('''
    import os, signal, sys, time
    sys.path[:0] = sys.argv[2:]
    from test_cluster_units import SignalAt, _toy_runner
    from cvt_mm.engine.hooks import TrainingPreempted

    runner = _toy_runner(sys.argv[1], 'late', [SignalAt(3)], signals=('SIGTERM', 'SIGUSR1'))
    try:
        runner.train()
    except TrainingPreempted:
        # What the ranks still running get when the first one has exited with 75 (srun
        # --kill-on-bad-exit, torchrun): it lands while this one is on its way out.
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        raise
''')


def test_a_launchers_sigterm_after_the_checkpoint_keeps_the_preempted_exit_code(tmp_path):
    """A rank killed by the launcher's SIGTERM after the checkpoint would report a death by
    signal, and tools/slurm_sbatch.sh requeues only on the preempted exit code."""
    from cvt_mm.engine.hooks import PREEMPTED_EXIT_CODE
    proc = subprocess.run([sys.executable, '-c', LATE_SIGTERM, str(tmp_path),
                           os.path.dirname(__file__), os.path.join(ROOT, 'tests'), ROOT],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == PREEMPTED_EXIT_CODE, proc.stderr[-3000:]
    assert (tmp_path / 'iter_4.pth').exists()


# ----------------------------------------------------------------------------- the resume choice
CHOOSE = textwrap.dedent('''
    import os, sys, time
    import torch
    import torch.distributed as dist
    from mmengine.config import Config
    import cvt_mm  # noqa
    from cvt_mm.apis import launch
    from cvt_mm.apis.launch import choose_resume, finish_distributed

    work, rank = sys.argv[1], int(os.environ['RANK'])
    looked = os.path.join(work, 'rank_0_looked')
    real_find = launch.find_resumable_checkpoint

    def find(work_dir):
        if rank == 1:  # rank 1 looks after rank 0...
            while not os.path.exists(looked):
                time.sleep(0.05)
        found = real_find(work_dir)
        if rank == 0:  # ...and a newer checkpoint lands in between
            torch.save({'state_dict': {}, 'optimizer': {}, 'meta': {'iter': 4, 'seed': 4}},
                       os.path.join(work_dir, 'iter_4.pth'))
            open(looked, 'w').close()
        return found

    launch.find_resumable_checkpoint = find
    dist.init_process_group('gloo')
    cfg = Config(dict(work_dir=work))
    choose_resume(cfg, 'auto')
    print(cfg.load_from, cfg.randomness.seed, flush=True)
    finish_distributed()  # as tools/train.py ends
''')


def test_every_rank_resumes_from_the_checkpoint_rank_0_chose(tmp_path):
    torch.save({'state_dict': {}, 'optimizer': {}, 'meta': {'iter': 2, 'seed': 2}},
               tmp_path / 'iter_2.pth')
    env = dict(os.environ, PYTHONPATH=ROOT, MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(free_port()), WORLD_SIZE='2', OMP_NUM_THREADS='1')
    for name in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT'):
        env.pop(name, None)
    procs = [subprocess.Popen([sys.executable, '-c', CHOOSE, str(tmp_path)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    chosen = [out.splitlines()[-1].split() for out, _ in outputs]
    assert chosen == [[str(tmp_path / 'iter_2.pth'), '2']] * 2, \
        f'rank 0 resumes from {chosen[0]}, rank 1 from {chosen[1]}'


def test_the_resumed_checkpoint_is_read_once(tmp_path, monkeypatch):
    """Choosing the checkpoint, taking its seed and describing the restart read it once,
    mapped rather than copied into memory."""
    path = str(tmp_path / 'iter_6.pth')
    torch.save({'state_dict': {'w': torch.ones(3)}, 'optimizer': {},
                'meta': {'iter': 6, 'epoch': 1, 'seed': 7}}, path)
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')  # also describes the restart
    monkeypatch.delenv('SLURM_RESTART_COUNT', raising=False)
    reads, real_load = [], torch.load

    def counting_load(f, *args, **kwargs):
        reads.append((os.fspath(f), kwargs.get('mmap', False)))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, 'load', counting_load)
    cfg = Config(dict(work_dir=str(tmp_path)))
    choose_resume(cfg, None)
    assert (cfg.load_from, cfg.randomness.seed) == (path, 7)
    assert reads == [(path, True)], f'{len(reads)} reads: {reads}'


# ----------------------------------------------------------------------------- partial writes
STUCK_WRITER = textwrap.dedent('''
    import os, sys, time
    from cvt_mm.checkpoint.io import write_atomically

    def stuck(fd):  # the data is written, the process is killed before it is complete
        print('saving', flush=True)
        time.sleep(600)

    os.fsync = stuck
    write_atomically(b'x' * 4096, sys.argv[1])
''')


def _parts(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith('.part'))


def test_a_save_removes_what_killed_saves_left_and_keeps_live_ones(tmp_path):
    def writer(name):
        proc = subprocess.Popen([sys.executable, '-c', STUCK_WRITER, str(tmp_path / name)],
                                stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=ROOT))
        assert proc.stdout.readline().strip() == 'saving'
        return proc

    killed = writer('iter_2.pth')
    killed.kill()  # SIGKILL mid-save
    killed.wait()
    left = _parts(tmp_path)
    assert len(left) == 1
    live = writer('iter_4.pth')  # another save still being written
    try:
        being_written = [p for p in _parts(tmp_path) if p not in left]
        # The live writer's part file is there, so that keeping it is something to check.
        assert len(being_written) == 1, _parts(tmp_path)
        from cvt_mm.checkpoint.io import write_atomically
        write_atomically(b'{}', tmp_path / 'last_checkpoint')  # the next save
        assert _parts(tmp_path) == being_written, \
            f'part files after the next save: {_parts(tmp_path)}; expected {being_written}'
    finally:
        live.kill()
        live.wait()
