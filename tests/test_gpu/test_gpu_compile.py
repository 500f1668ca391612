"""Eager against ``torch.compile`` for CvT-13 and CMT-S, a training step (forward, backward of
the outputs' means) and an inference forward, at the detection size, batch 2: the median of
the timed steps after warm-up (the first compiled call, which compiles, among the warm-up),
each side's peak CUDA memory, and eager over compiled time (> 1: compiling pays). Compiled
with inductor on CUDA; the CPU rehearsal compiles with the ``eager`` backend (dynamo's trace
only: inductor's C++ build takes minutes a model on a CPU), so its ratio means nothing."""
import contextlib
import statistics

import pytest
import torch

from gpu_helpers import BACKBONES, CUDA, PLAN, build_backbone, no_tf32, record

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _time(model, x, train: bool):
    from benchmarks.measure import peak_memory_gib, time_steps

    def step():
        with contextlib.nullcontext() if train else torch.no_grad():
            outs = model(x)
        if train:
            sum(o.float().mean() for o in outs).backward()
            model.zero_grad(set_to_none=True)

    time_steps(step, 0, PLAN.warmup_steps + 1, PLAN.device)
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, 0, PLAN.timed_steps, PLAN.device)
    return statistics.median(times), peak_memory_gib(PLAN.device) if CUDA else None


@pytest.mark.parametrize('mode', ['train', 'infer'])
@pytest.mark.parametrize('name', list(BACKBONES))
def test_compile(name, mode, record_property):
    torch._dynamo.reset()
    model = build_backbone(name).to(PLAN.device)
    x = torch.randn(2, 3, *PLAN.det_shape, device=PLAN.device)
    with no_tf32(), torch.no_grad():
        expected = model.eval()(x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    eager_s, eager_gib = _time(model.train(mode == 'train'), x, mode == 'train')
    model.compile(backend='inductor' if CUDA else 'eager')
    model.load_state_dict(state)  # the BatchNorm statistics the training steps moved
    with no_tf32(), torch.no_grad():
        outs = model.eval()(x)
    error = max(((o - e).norm() / e.norm()).item() for o, e in zip(outs, expected))
    compiled_s, compiled_gib = _time(model.train(mode == 'train'), x, mode == 'train')
    ratio = eager_s / compiled_s
    memory = f', peak {eager_gib:.2f} / {compiled_gib:.2f} GiB' if CUDA else ''
    record(record_property, f'eager {eager_s:.3f} s, compiled {compiled_s:.3f} s: '
           f'{ratio:.2f}x{memory}; outputs within {error:.1e}', eager_s=eager_s,
           compiled_s=compiled_s, ratio=ratio, eager_gib=eager_gib, compiled_gib=compiled_gib,
           out_rel_error=error, shape=list(PLAN.det_shape))
    # The compiled model computes what the eager one did (fp32, TF32 off).
    assert error <= 1e-4
