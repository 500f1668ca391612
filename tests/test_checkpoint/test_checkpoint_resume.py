"""Save and resume of MMEngine checkpoints on torch >= 2.6 with safe loading still on."""
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch import nn
from torch.utils.data import Dataset

import cvt_mm  # noqa: F401  (installs the allow-list under test)

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow


class _Regression(BaseModel):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, inputs, targets, mode='tensor'):
        pred = self.net(torch.stack(inputs) if isinstance(inputs, list) else inputs)
        if mode == 'loss':
            target = torch.stack(targets) if isinstance(targets, list) else targets
            return dict(loss=((pred - target) ** 2).mean())
        return pred


class _Points(Dataset):
    def __init__(self, n=32):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = self.x.sum(1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return dict(inputs=self.x[i], targets=self.y[i])


def _runner(work_dir, max_iters, resume=False):
    return Runner(
        model=_Regression(),
        work_dir=str(work_dir),
        train_dataloader=dict(dataset=_Points(), sampler=dict(type='DefaultSampler', shuffle=True),
                              batch_size=4, num_workers=0),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-2)),
        param_scheduler=[dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=2),
                         dict(type='CosineAnnealingLR', by_epoch=False, begin=2, end=max_iters)],
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=3, by_epoch=False),
                           logger=dict(type='LoggerHook', interval=1)),
        resume=resume,
        randomness=dict(seed=0),
        default_scope='mmengine',
        # MMEngine keeps one logger and visualizer per experiment name for the whole process:
        # a name of each work dir's own, or a later test writes into an earlier one's folder.
        experiment_name=f'{work_dir.name}_{max_iters}_{int(resume)}')


def test_resume_continues_at_saved_iteration_with_saved_optimizer(tmp_path):
    first = _runner(tmp_path, max_iters=3)
    first.train()
    ckpt_path = tmp_path / 'iter_3.pth'
    assert ckpt_path.is_file()
    saved = torch.load(ckpt_path, map_location='cpu')  # the default: weights_only=True
    assert saved['meta']['iter'] == 3
    # the message hub is the part that safe loading used to refuse
    assert 'log_scalars' in saved['message_hub']

    second = _runner(tmp_path, max_iters=6, resume=True)
    seen = {}

    def record(runner, batch_idx, data_batch=None):
        if 'iter' not in seen:
            seen['iter'] = runner.iter
            seen['exp_avg'] = [s['exp_avg'].clone() for s in
                               runner.optim_wrapper.optimizer.state_dict()['state'].values()]
            seen['lr'] = runner.optim_wrapper.get_lr()['lr'][0]
            seen['step'] = [s['step'].clone() for s in
                            runner.optim_wrapper.optimizer.state_dict()['state'].values()]
            seen['weights'] = {k: v.clone() for k, v in runner.model.state_dict().items()}

    from mmengine.hooks import Hook

    class _Probe(Hook):
        def before_train_iter(self, runner, batch_idx, data_batch=None):
            record(runner, batch_idx, data_batch)

    second.register_hook(_Probe(), priority='VERY_LOW')
    second.train()

    assert seen['iter'] == 3, 'resumed run must continue at the saved iteration'
    assert second.iter == 6
    saved_state = saved['optimizer']['state']
    assert len(seen['exp_avg']) == len(saved_state) > 0
    for got, want in zip(seen['exp_avg'], saved_state.values()):
        torch.testing.assert_close(got, want['exp_avg'])
    for got, want in zip(seen['step'], saved_state.values()):
        assert float(got) == float(want['step']) == 3.0
    # the scheduler state was restored too: lr continues the cosine decay, not a fresh warmup
    assert seen['lr'] == pytest.approx(saved['optimizer']['param_groups'][0]['lr'])
    # the resumed model starts from the saved weights
    for key, value in saved['state_dict'].items():
        torch.testing.assert_close(seen['weights'][key], value)
    assert (tmp_path / 'iter_6.pth').is_file()


class _Payload:
    """An arbitrary object: unpickling it must stay forbidden."""

    def __reduce__(self):
        return (print, ('payload executed',))


def test_safe_loading_still_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / 'evil.pth'
    with open(path, 'wb') as f:
        torch.save({'state_dict': {}, 'extra': _Payload()}, f)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, map_location='cpu')
    from mmengine.runner import load_checkpoint

    from cvt_mm.checkpoint import CheckpointError
    # MMEngine's own loader (torch's refusal), or ours where a tool in this process called
    # cvt_mm.setup_process() (the same refusal, in words: cvt_mm.checkpoint.io).
    with pytest.raises((pickle.UnpicklingError, CheckpointError), match='print'):
        load_checkpoint(nn.Linear(1, 1), str(path), map_location='cpu')


def test_without_cvt_mm_mmengine_checkpoints_do_not_load(tmp_path):
    """Guards the premise: plain MMEngine on this torch cannot resume its own checkpoint."""
    runner = _runner(tmp_path, max_iters=3)
    runner.train()
    code = textwrap.dedent(f"""
        import pickle, torch
        try:
            torch.load({str(tmp_path / 'iter_3.pth')!r}, map_location='cpu')
        except pickle.UnpicklingError:
            print('REFUSED')
        else:
            print('LOADED')
    """)
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == 'REFUSED', out.stdout + out.stderr
