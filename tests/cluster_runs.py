"""Real processes of cluster scenarios, shared by the cluster test modules
(test_cluster_training, test_slurm, test_two_nodes_netns): start launcher scripts, find their
processes in /proc, wait for checkpoints, compare final weights bit for bit, and the narrow
user configs they train.

Example::

    from cluster_runs import exact_config, assert_same_weights
"""
import os
import os.path as osp
import subprocess
import sys
import time

import torch

from cvt_mm.checkpoint import read_checkpoint

from helpers import (
    EXIT_PROBE_ENV,
    PACE,
    PACED_ENV,
    ROOT,
    det_user_config,
    load_tool,
    narrow_config,
    seg_user_config,
)

# One thread per process, as torchrun sets it: floating-point sums depend on the thread
# count, and runs are compared bit for bit.
BASE_ENV = dict(OMP_NUM_THREADS='1', PYTHON=sys.executable)


def children(pid: int) -> list:
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


def local_rank(pid: int):
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            env = dict(v.split(b'=', 1) for v in f.read().split(b'\0') if b'=' in v)
    except OSError:
        return None
    return int(env[b'LOCAL_RANK']) if b'LOCAL_RANK' in env else None


def alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def alive_after(pids, seconds: float) -> list:
    """The pids still alive once all have ended or ``seconds`` have passed."""
    deadline = time.time() + seconds
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def command_line(pid: int) -> bytes:
    """Process ``pid``'s NUL-separated command line; empty once it has ended (a launcher
    script's short-lived children, such as ``dirname``, end between listing and reading)."""
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            return f.read()
    except OSError:
        return b''


def launcher_pid(shell: subprocess.Popen, name: str) -> int:
    """The torchrun (or srun) process under a launcher script."""
    deadline = time.time() + 60
    while time.time() < deadline:
        for pid in children(shell.pid):
            if name.encode() in command_line(pid):
                return pid
        time.sleep(0.05)
    raise AssertionError(f'no {name} under {shell.args}')


def start(args, log, env=None) -> subprocess.Popen:
    full = dict(os.environ, **BASE_ENV, **(env or {}))
    # The narrow models' iterations are paced (helpers.narrow_config): a signal sent when
    # a checkpoint appears lands in the next iteration, or in the save, on any machine.
    # Every rank also reports the gloo threads left at its exit (helpers.EXIT_PROBE_ENV).
    full['PYTHONPATH'] = os.pathsep.join([ROOT, PACED_ENV['PYTHONPATH'],
                                          EXIT_PROBE_ENV['PYTHONPATH'],
                                          full.get('PYTHONPATH', '')])
    return subprocess.Popen(['bash', *args], cwd=ROOT, env=full, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def run(args, log_path, env=None, timeout=900) -> int:
    with open(log_path, 'a') as log:
        proc = start(args, log, env)
        return proc.wait(timeout=timeout)


def wait_for(predicate, proc, what: str, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f'the run ended before {what}'
        assert time.time() < deadline, f'timed out waiting for {what}'
        time.sleep(0.02)


def pointer_is(work, name):
    def check():
        try:
            return (work / 'last_checkpoint').read_text().strip().endswith(name)
        except OSError:
            return False
    return check


def drop_checkpoints(work) -> None:
    """Delete a finished scenario's checkpoints once compared (pytest keeps the last
    three runs' temporary folders)."""
    for path in work.glob('*.pth'):
        path.unlink()


def weights(path):
    return read_checkpoint(str(path))['state_dict']


def assert_same_weights(reference, resumed):
    a, b = weights(reference), weights(resumed)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


def exact_config(root, kind: str, data: str) -> str:
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


def make_cluster_data(out: str) -> str:
    """6 COCO-layout and 12 ADE-layout training images under ``out``: 3 iterations per epoch
    for two processes at batch 1 (detection) and 2 (segmentation)."""
    load_tool('misc/make_demo_data').main([
        '--out', out, '--size', '96', '--coco-train', '6', '--coco-val', '2', '--ade-train',
        '12', '--ade-val', '2', '--max-objects', '3', '--seed', '3', '--imagenet-train', '0',
        '--imagenet-val', '0'])
    return out
