"""Checkpoints and resume as they fail in practice: a process killed while writing, a truncated
newest checkpoint, nothing to resume, a run killed (SIGKILL) after a checkpoint that must end
with the same weights as an uninterrupted run, and a NaN that must not reach the weights."""
import os
import os.path as osp
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from mmengine.config import Config

from cvt_mm.apis.launch import choose_resume, find_resumable_checkpoint
from cvt_mm.checkpoint import read_checkpoint
from cvt_mm.checkpoint.io import CheckpointError
from cvt_mm.engine.runner import TRAINING_HOOKS

from helpers import (
    PACE,
    PACED_ENV,
    ROOT,
    executed_iterations,
    narrow_config,
    run_tool,
    seg_user_config,
)

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------- atomic writes
WRITER = textwrap.dedent('''
    import sys, torch
    import cvt_mm
    from mmengine.runner.checkpoint import save_checkpoint
    cvt_mm.setup_process()  # the atomic local backend, as tools/train.py has it
    path = sys.argv[1]
    big = {'state_dict': {'w': torch.randn(64, 2 ** 20)}}  # 256 MiB per write
    print('writing', flush=True)
    while True:
        save_checkpoint(big, path)
''')


def test_a_process_killed_while_saving_leaves_no_truncated_checkpoint(tmp_path):
    path = tmp_path / 'iter_8.pth'
    proc = subprocess.Popen([sys.executable, '-c', WRITER, str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert proc.stdout.readline().strip() == b'writing'
        deadline = time.time() + 120
        while not path.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # inside a later write now
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The final name holds a complete file; the interrupted write is only a temporary file.
    assert read_checkpoint(str(path))['state_dict']['w'].shape == (64, 2 ** 20)


# ----------------------------------------------------------------------------- which file
def _save(path, iteration):
    torch.save({'state_dict': {'w': torch.ones(1)}, 'optimizer': {}, 'meta': {'iter': iteration}},
               path)


def test_a_truncated_checkpoint_to_resume_from_is_named_before_the_runner_starts(tmp_path):
    """Our tools write whole files (tools/train.py's atomic backend); one another tool cut
    short stops the resume with its name and what it is, not deep inside MMEngine."""
    _save(tmp_path / 'iter_2.pth', 2)
    _save(tmp_path / 'iter_4.pth', 4)
    data = (tmp_path / 'iter_4.pth').read_bytes()
    (tmp_path / 'iter_4.pth').write_bytes(data[:len(data) // 2])
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_4.pth'))
    assert find_resumable_checkpoint(str(tmp_path)) == str(tmp_path / 'iter_4.pth')
    with pytest.raises(CheckpointError, match=r'iter_4\.pth .*(truncated|ends too early)'):
        choose_resume(Config(dict(work_dir=str(tmp_path))), 'auto')


def test_nothing_to_resume_is_said_plainly(tmp_path):
    assert find_resumable_checkpoint(str(tmp_path)) is None
    torch.save({'w': torch.ones(1)}, tmp_path / 'backbone.pth')  # weights, not a training run
    with pytest.raises(ValueError, match='backbone.pth is not a training checkpoint '
                                         r'\(no state_dict, optimizer, meta\)'):
        choose_resume(Config(dict(work_dir=str(tmp_path))), 'auto')


# ----------------------------------------------------------------------------- exact resume
def _exact_config(path, data, work):
    """UperNet on a narrow CvT (drop path 0.1: the forward draws random numbers),
    deterministic, 6 iterations of MMSegmentation's iteration-based loop with its infinite
    sampler and two persistent data workers (as the ADE20K configs load data), checkpoints
    every 2, validation at 4 (after the checkpoint the run is killed after, before the next
    training iteration, which starts with a pause of PACE seconds)."""
    base = seg_user_config(
        str(path) + '.base.py', data, str(work), max_iters=6,
        randomness=dict(seed=0, deterministic=True),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=6, val_interval=4),
        default_hooks=dict(logger=dict(interval=1),
                           checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2)))
    with open(path, 'w') as f:
        f.write(f"_base_ = {narrow_config(base, 'seg', PACE)!r}\n"
                "train_dataloader = dict(num_workers=2, persistent_workers=True,\n"
                "                        sampler=dict(type='InfiniteSampler', shuffle=True))\n")
    return str(path)


def _weights(path):
    return read_checkpoint(str(path))['state_dict']


@pytest.fixture(scope='module')
def killed_and_resumed(tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp('exact')
    data = osp.join(tiny_data, 'ade')
    config_a = _exact_config(root / 'a.py', data, root / 'a')
    run_tool(['train.py', config_a], env=PACED_ENV)

    config_b = _exact_config(root / 'b.py', data, root / 'b')
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + PACED_ENV['PYTHONPATH'])
    proc = subprocess.Popen([sys.executable, osp.join(ROOT, 'tools', 'train.py'), config_b],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    pointer = root / 'b' / 'last_checkpoint'
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            if pointer.exists() and pointer.read_text().strip().endswith('iter_4.pth'):
                break
            time.sleep(0.02)
        assert proc.poll() is None, 'the run ended before it could be killed'
    finally:
        proc.send_signal(signal.SIGKILL)  # in iteration 5, after the iteration-4 checkpoint
        proc.wait()
    assert not (root / 'b' / 'iter_6.pth').exists()
    resumed = run_tool(['train.py', config_b, '--resume'], env=PACED_ENV)
    return root, resumed.stdout + resumed.stderr


def test_a_killed_run_resumes_to_the_same_weights_bit_for_bit(killed_and_resumed):
    root, log = killed_and_resumed
    assert f'--resume: resuming from {root}/b/iter_4.pth' in log
    assert 'Iter(train) [5/6]' in log and 'Iter(train) [4/6]' not in log
    # The 4 batches already trained on are skipped by their indices, not loaded again.
    assert 'Resuming at iteration 5: the indices of the 4 batches' in log
    assert executed_iterations(root / 'b') == [[1, 2, 3, 4], [5, 6]]
    uninterrupted, resumed = _weights(root / 'a' / 'iter_6.pth'), _weights(root / 'b' /
                                                                          'iter_6.pth')
    assert uninterrupted.keys() == resumed.keys()
    different = [k for k in uninterrupted if not torch.equal(uninterrupted[k], resumed[k])]
    assert different == []


def test_resume_without_checkpoints_says_so(tiny_data, tmp_path):
    config = narrow_config(seg_user_config(str(tmp_path / 'c.py'), osp.join(tiny_data, 'ade'),
                                           str(tmp_path / 'work'), max_iters=1), 'seg')
    proc = run_tool(['train.py', config, '--resume'], warm=True)
    assert (f'--resume: no checkpoint to resume from in {tmp_path}/work; training starts at '
            'the beginning') in proc.stdout
    assert 'Auto resumed from the latest checkpoint None' not in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- NaN inputs
NAN_TRANSFORM = textwrap.dedent('''
    import numpy as np
    from mmcv.transforms import BaseTransform
    from mmseg.registry import TRANSFORMS


    @TRANSFORMS.register_module()
    class NaNPixelIn(BaseTransform):
        """What a corrupt decode gives: one NaN pixel in one file."""

        def __init__(self, name):
            self.name = name

        def transform(self, results):
            if results['img_path'].endswith(self.name):
                results['img'] = results['img'].astype(np.float32)
                results['img'][5, 5, 0] = np.nan
            return results
''')


def test_a_nan_pixel_stops_training_before_it_reaches_the_weights(tiny_data, tmp_path):
    data = osp.join(tiny_data, 'ade')
    images = sorted(os.listdir(osp.join(data, 'images', 'training')))
    poisoned = images[2]  # unshuffled, batch 2: the second iteration
    (tmp_path / 'nan_pixel.py').write_text(NAN_TRANSFORM)
    config = seg_user_config(
        str(tmp_path / 'nan.py'), data, str(tmp_path / 'work'), max_iters=4,
        custom_imports=dict(imports=['cvt_mm', 'nan_pixel'], allow_failed_imports=False),
        default_hooks=dict(logger=dict(interval=1),
                           checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=1)))
    with open(config, 'a') as f:
        f.write(textwrap.dedent(f'''
            # After the random crop, so the pixel is always in the batch.
            train_pipeline.insert(len(train_pipeline) - 1,
                                  dict(type='NaNPixelIn', name={poisoned!r}))
            train_dataloader['dataset']['pipeline'] = train_pipeline
            train_dataloader['sampler'] = dict(type='InfiniteSampler', shuffle=False)
        '''))
    proc = run_tool(['train.py', narrow_config(config, 'seg')],
                    env=dict(PYTHONPATH=str(tmp_path)), expect_success=False)
    assert proc.returncode != 0
    err = proc.stderr
    assert 'FloatingPointError: non-finite loss (nan) at iteration 2' in err, err[-3000:]
    assert poisoned in err and 'newest checkpoint' in err
    work = tmp_path / 'work'
    assert (work / 'iter_1.pth').exists() and not (work / 'iter_2.pth').exists()
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_1.pth')
    assert all(torch.isfinite(v).all() for v in _weights(work / 'iter_1.pth').values()
               if v.is_floating_point())


# ----------------------------------------------------------------------------- other launchers
def test_mmdetections_own_train_py_trains_with_the_training_guards(tiny_data, tmp_path):
    """Our configs name ExactResumeRunner, the resumable loop and the training hooks, so
    MMDetection's tools/train.py (what `mim train` runs) gets them too: a checkpoint it writes
    holds every rank's data position and generators."""
    import mmdet

    from helpers import det_user_config
    config = narrow_config(det_user_config(str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work')),
                           'det')
    mmdet_train = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    proc = subprocess.run([sys.executable, mmdet_train, config], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    # The config lists the guards (configs/_base_/training_guards.py): MMEngine's table of the
    # hooks it runs names them, and the runner had none to add.
    hook_table = log.split('Hooks will be executed in the following order:')[1]
    assert all(name in hook_table for name in TRAINING_HOOKS)
    assert 'Training guards added' not in log
    state = read_checkpoint(str(tmp_path / 'work' / 'epoch_1.pth'))['resume_state']
    assert (state['epoch'], state['batch'], state['world_size']) == (1, 0, 1)
    assert state['data_states'][0]['num_workers'] == 0  # the StatefulDataLoader's state
