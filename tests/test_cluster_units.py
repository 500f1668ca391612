"""The pieces of cluster-scale training, one at a time: per-sample seeds, the batch sampler
that starts part-way, data workers that die with their process, the slurm environment,
restart detection, the checkpoint a restart picks, the config changes tools/train.py makes,
and a stop signal that cannot be agreed with a dead peer (real processes, real gloo)."""
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import DefaultSampler, InfiniteSampler
from torch.utils.data import DataLoader

import cvt_mm  # noqa: F401
from cvt_mm.engine.data import (
    ResumableBatchSampler,
    SampleIndex,
    SeededSampleDataset,
    derive_sample_seed,
    resumable_dataloader_cfg,
)
from cvt_mm.engine.launch import first_slurm_host, prepare_training, slurm_environment
from cvt_mm.engine.preemption import STOPPED_EXIT_CODE, PreemptionHook
from cvt_mm.engine.resume import describe_restart, find_resumable_checkpoint, restart_count

from helpers import ROOT


class RandomDataset:
    """Each item draws from the global generators, as random transforms do."""

    def __init__(self, n=12):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (int(i), random.random(), float(np.random.rand()), float(torch.rand(1)))


# ----------------------------------------------------------------------------- sample seeds
def test_a_sample_index_is_an_int_that_keeps_its_seed_through_pickling():
    index = SampleIndex(7, sample_seed=2**62 + 5)
    copy = pickle.loads(pickle.dumps(index))
    assert copy == 7 and copy + 1 == 8 and [10, 11, 12, 13, 14, 15, 16, 17][index] == 17
    assert copy.sample_seed == 2**62 + 5 and type(copy) is SampleIndex


def test_derived_seeds_differ_per_key_and_repeat_per_key():
    keys = [(0, e, r, p) for e in range(2) for r in range(2) for p in range(50)]
    seeds = [derive_sample_seed(*k) for k in keys]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**63 for s in seeds)
    assert derive_sample_seed(3, 1, 0, 9) == derive_sample_seed(3, 1, 0, 9)
    assert derive_sample_seed(4, 1, 0, 9) != derive_sample_seed(3, 1, 0, 9)


def test_the_seeded_dataset_depends_on_the_key_alone_and_leaves_the_caller_alone():
    data = SeededSampleDataset(RandomDataset())
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = data[SampleIndex(3, sample_seed=11)]
    assert torch.equal(torch.get_rng_state(), before)  # the caller's stream is untouched
    random.random(), np.random.rand(), torch.rand(1)  # whatever happened before
    assert data[SampleIndex(3, sample_seed=11)] == first
    assert data[SampleIndex(3, sample_seed=12)] != first
    assert data[3][0] == 3 and len(data) == 12  # plain indices pass through


def _loader(dataset, sampler, num_workers, persistent):
    return DataLoader(SeededSampleDataset(dataset),
                      batch_sampler=ResumableBatchSampler(sampler, batch_size=3, seed=5),
                      num_workers=num_workers, persistent_workers=persistent,
                      collate_fn=lambda b: b)


def test_what_a_sample_gets_does_not_depend_on_which_worker_loads_it():
    dataset = RandomDataset()
    runs = []
    for workers, persistent in ((0, False), (2, True), (1, False)):
        sampler = DefaultSampler(dataset, shuffle=True, seed=1)
        loader = _loader(dataset, sampler, workers, persistent)
        epochs = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            epochs.append([item for batch in loader for item in batch])
        runs.append(epochs)
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] != runs[0][1]  # another epoch, other draws


def test_a_started_iteration_continues_the_full_one_exactly():
    dataset = RandomDataset(14)
    sampler = DefaultSampler(dataset, shuffle=True, seed=2)
    loader = _loader(dataset, sampler, 2, True)
    full = [batch for batch in loader]
    loader.batch_sampler.start_at(2)
    assert [batch for batch in loader] == full[2:]
    assert [batch for batch in loader] == full  # the start applies once
    loader.batch_sampler.hold()
    assert list(loader) == []
    loader.batch_sampler.start_at(4)
    assert list(loader) == full[4:]
    with pytest.raises(ValueError, match='must be >= 0'):
        loader.batch_sampler.start_at(-1)


def test_the_start_survives_a_dataloader_that_iterates_its_sampler_twice():
    """PyTorch's multi-process iterator calls iter() on the batch sampler twice when it is
    created; the start is read when the first batch is drawn."""
    sampler = ResumableBatchSampler(list(range(10)), batch_size=2, seed=0)
    sampler.start_at(3)
    first, second = iter(sampler), iter(sampler)
    assert [int(i) for i in next(second)] == [6, 7]
    del first


def test_an_infinite_stream_resumes_at_the_same_batches_and_seeds():
    dataset = RandomDataset(5)
    full = ResumableBatchSampler(InfiniteSampler(dataset, seed=3), batch_size=2, seed=3)
    stream = iter(full)
    reference = [next(stream) for _ in range(9)]
    resumed = ResumableBatchSampler(InfiniteSampler(dataset, seed=3), batch_size=2, seed=3)
    resumed.start_at(6)
    stream = iter(resumed)
    tail = [next(stream) for _ in range(3)]
    assert tail == reference[6:]
    assert [[i.sample_seed for i in b] for b in tail] == \
        [[i.sample_seed for i in b] for b in reference[6:]]


def test_bucketing_batch_samplers_are_skipped_through_their_own_batches():
    from mmdet.datasets.samplers import AspectRatioBatchSampler

    class Shapes(RandomDataset):
        def get_data_info(self, i):
            return dict(width=100 + 50 * (i % 3 == 0), height=100)

    dataset = Shapes(16)
    make = lambda: ResumableBatchSampler(  # noqa: E731
        DefaultSampler(dataset, shuffle=True, seed=0), batch_size=3, seed=0,
        batch_sampler=AspectRatioBatchSampler(DefaultSampler(dataset, shuffle=True, seed=0), 3))
    full = list(make())
    started = make()
    started.start_at(2)
    assert list(started) == full[2:] and len(full) == len(started)


def test_the_train_dataloader_config_is_wrapped_once():
    cfg = dict(batch_size=2, num_workers=2, drop_last=True, dataset=dict(type='X'),
               sampler=dict(type='DefaultSampler'))
    wrapped = resumable_dataloader_cfg(cfg, seed=3)
    assert wrapped['dataset'] == dict(type='SeededSampleDataset', dataset=dict(type='X'))
    assert wrapped['batch_sampler']['type'] == 'ResumableBatchSampler'
    assert wrapped['batch_sampler']['drop_last'] is True and 'drop_last' not in wrapped
    assert wrapped['worker_init_fn'] == dict(type='guard_data_worker', seed=3)
    again = resumable_dataloader_cfg(wrapped, seed=3)
    assert again['dataset'] == wrapped['dataset']
    assert again['batch_sampler']['batch_sampler'] is None  # not wrapped twice


# ----------------------------------------------------------------------------- data workers
ORPHAN_PARENT = textwrap.dedent('''
    import os, sys, time
    import torch
    from torch.utils.data import DataLoader
    import cvt_mm  # noqa
    from cvt_mm.engine.data import guard_data_worker

    class Slow:
        def __len__(self): return 10**6
        def __getitem__(self, i):
            time.sleep(0.01)
            return torch.zeros(1000)

    loader = DataLoader(Slow(), batch_size=4, num_workers=2, persistent_workers=True,
                        worker_init_fn=guard_data_worker)
    it = iter(loader)
    next(it)
    print(' '.join(str(w.pid) for w in it._workers), flush=True)
    time.sleep(600)
''')


def _alive(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().split()[2] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG is Linux')
def test_data_workers_die_with_a_killed_training_process():
    proc = subprocess.Popen([sys.executable, '-c', ORPHAN_PARENT], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(w) for w in workers)
    # Scheduler signals reach the workers too; they leave them to the training process.
    for w in workers:
        os.kill(w, signal.SIGTERM)
        os.kill(w, signal.SIGUSR1)
    time.sleep(0.5)
    assert all(_alive(w) for w in workers)
    proc.kill()  # SIGKILL, as the kernel's OOM killer
    proc.wait()
    deadline = time.time() + 10
    while any(_alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)


def test_a_process_with_guarded_workers_still_exits_by_itself():
    """Guarded workers ignore SIGTERM, which is how Python ends daemonic children at exit:
    the exit must not wait for them forever."""
    script = ORPHAN_PARENT.replace('time.sleep(600)', 'sys.exit(3)')
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert not any(_alive(int(p)) for p in proc.stdout.split())


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


# ----------------------------------------------------------------------------- restarts
def test_restarts_are_told_by_torchrun_and_slurm_together(monkeypatch):
    for name in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT'):
        monkeypatch.delenv(name, raising=False)
    assert restart_count() == 0
    monkeypatch.setenv('SLURM_RESTART_COUNT', '2')
    assert restart_count() == 2
    # torchrun started by a requeued job counts from 0: the requeue is not hidden by it.
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '0')
    assert restart_count() == 2
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')
    assert restart_count() == 3
    line = describe_restart('/nonexistent', None)
    assert line.startswith('slurm requeue 2, after a preemption, a time limit or a failure '
                           'and torchrun restart 1 of')


def _training_checkpoint(path, iteration, epoch=0):
    torch.save({'state_dict': {'w': torch.ones(1)}, 'optimizer': {},
                'meta': {'iter': iteration, 'epoch': epoch}}, path)


def test_the_restart_message_names_the_checkpoint_and_the_work_lost(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCHELASTIC_RESTART_COUNT', '1')
    monkeypatch.setenv('TORCHELASTIC_MAX_RESTARTS', '3')
    _training_checkpoint(tmp_path / 'iter_40.pth', 40, 1)
    line = describe_restart(str(tmp_path), str(tmp_path / 'iter_40.pth'))
    assert line.startswith('torchrun restart 1 of 3') and 'iteration 40, epoch 1' in line
    assert 'left no heartbeat' in line
    (tmp_path / 'heartbeat.json').write_text(
        '{"iter": 52, "epoch": 1, "time": %f, "interval": 10, "seconds_per_iter": 5.0}'
        % time.time())
    line = describe_restart(str(tmp_path), str(tmp_path / 'iter_40.pth'))
    assert '12 iterations (about 1.0 min) are lost, and up to 10 s after that record' in line
    line = describe_restart(str(tmp_path), None)
    assert 'training starts again at iteration 1' in line and '52 iterations' in line


def test_a_restart_picks_the_newest_write_when_epoch_and_iteration_names_mix(tmp_path):
    _training_checkpoint(tmp_path / 'iter_1800.pth', 1800, 2)  # a preemption checkpoint...
    time.sleep(0.01)
    _training_checkpoint(tmp_path / 'epoch_3.pth', 2250, 3)  # ...then the next epoch's
    assert find_resumable_checkpoint(str(tmp_path)) == (str(tmp_path / 'epoch_3.pth'), [])


# ----------------------------------------------------------------------------- tools/train.py
def test_training_configs_get_resumable_loops_and_the_cluster_hooks():
    cfg = Config.fromfile(os.path.join(ROOT, 'configs', 'mask_rcnn_cvt13_coco.py'))
    prepare_training(cfg)
    assert cfg.train_cfg.type == 'ResumableEpochBasedTrainLoop'
    assert [h['type'] for h in cfg.custom_hooks] == [
        'FiniteLossHook', 'ExactResumeHook', 'PreemptionHook', 'HeartbeatHook']
    assert cfg.val_dataloader.worker_init_fn == dict(type='guard_data_worker', seed=None)
    seg = Config.fromfile(os.path.join(ROOT, 'configs', 'upernet_cvt13_ade20k.py'))
    prepare_training(seg)
    assert seg.train_cfg.type == 'ResumableIterBasedTrainLoop'
    # MMPretrain's short form, and a config that lists a hook under its former name.
    short = Config(dict(train_cfg=dict(by_epoch=True, max_epochs=3),
                        custom_hooks=[dict(type='RandomStateHook')]))
    prepare_training(short)
    assert short.train_cfg == dict(type='ResumableEpochBasedTrainLoop', max_epochs=3)
    assert [h['type'] for h in short.custom_hooks] == [
        'RandomStateHook', 'FiniteLossHook', 'PreemptionHook', 'HeartbeatHook']


def test_unknown_signal_names_are_refused():
    with pytest.raises(ValueError, match="unknown signal 'SIGFOO'.*'SIGUSR1'"):
        PreemptionHook(signals=('SIGTERM', 'SIGFOO'))


# ----------------------------------------------------------------------------- dead peers
DEAD_PEER = textwrap.dedent('''
    import os, sys, time, types
    import torch.distributed as dist
    import cvt_mm  # noqa
    from cvt_mm.engine.preemption import PreemptionHook

    dist.init_process_group('gloo')
    if dist.get_rank() == 1:
        time.sleep(float(sys.argv[1]))  # alive but never at the boundary, or gone
        os._exit(0)
    hook = PreemptionHook(agree_timeout=3)
    hook.requested = 'SIGTERM'  # what torchrun sends the survivors when a rank died
    started = time.time()
    hook.after_train_iter(types.SimpleNamespace(work_dir=sys.argv[2]), batch_idx=0)
    print('returned', flush=True)
''')


@pytest.mark.parametrize('peer_lifetime', [0, 60], ids=['peer-exited', 'peer-stuck'])
def test_a_stop_that_cannot_be_agreed_exits_without_waiting_or_writing(tmp_path,
                                                                       peer_lifetime):
    from conftest import free_port
    env = dict(os.environ, PYTHONPATH=ROOT, MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(free_port()), WORLD_SIZE='2')
    procs = [subprocess.Popen([sys.executable, '-c', DEAD_PEER, str(peer_lifetime),
                               str(tmp_path)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    started = time.time()
    out, err = procs[0].communicate(timeout=60)
    elapsed = time.time() - started
    procs[1].kill()
    assert procs[0].returncode == STOPPED_EXIT_CODE, err[-2000:]
    assert 'returned' not in out and 'exiting without a checkpoint' in out + err
    assert elapsed < 30 and list(tmp_path.iterdir()) == []
