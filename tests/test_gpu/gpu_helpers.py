"""What the GPU checks (tests marked ``gpu``, run by ``make gpu-check``) share: the device and
sizes of this run, the backbones under test, the tolerances, and how a test records the
numbers the summary table prints.

On a machine with CUDA the checks run at the real sizes; without CUDA they are a small CPU
rehearsal of the same code, and the checks that only mean something on CUDA skip with a
reason that starts with ``no CUDA``.

Example::

    from gpu_helpers import PLAN, record

    def test_something(record_property):
        record(record_property, 'what the row says', median_s=0.31)
"""
from __future__ import annotations

import contextlib
import json
import os.path as osp
import re
from dataclasses import dataclass

import pytest
import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'
CUDA = DEVICE == 'cuda'


@dataclass(frozen=True)
class Plan:
    """Sizes of one run: the real ones on CUDA, small ones for the CPU rehearsal."""
    device: str
    parity_shape: tuple = (2, 3, 224, 320)
    sdpa_shape: tuple = (2, 3, 800, 1333)
    det_shape: tuple = (800, 1333)
    seg_shape: tuple = (512, 512)
    warmup_steps: int = 2
    timed_steps: int = 5
    amp: bool = True
    ddp_image_size: int = 128

    @classmethod
    def for_device(cls, device: str) -> 'Plan':
        if device == 'cuda':
            return cls(device)
        return cls(device, parity_shape=(2, 3, 64, 96), sdpa_shape=(1, 3, 96, 160),
                   det_shape=(96, 128), seg_shape=(64, 64), warmup_steps=1, timed_steps=1,
                   amp=False, ddp_image_size=96)


PLAN = Plan.for_device(DEVICE)


def no_cuda(why: str):
    """Skip marker of a check that needs CUDA; ``why`` says what it checks there."""
    return pytest.mark.skipif(not CUDA, reason=f'no CUDA: {why}')


BACKBONES = {
    'CvT-13': dict(type='CvT', arch='13'),
    'CMT-S': dict(type='CMT', arch='s'),
}
# Attention calls (one per transformer block) in one forward.
ATTENTION_CALLS = {'CvT-13': 13, 'CMT-S': 25}

# Relative L2 error against CPU fp32 (outputs; all parameter and input gradients together).
# fp32 runs with TF32 off, so only summation order differs. Autocast rounds to fp16 (10-bit
# mantissa) or bf16 (7-bit); CPU autocast measured fp16 9e-4-4e-3 and bf16 7e-3-3e-2 on both
# outputs and gradients, and CUDA autocasts more ops, hence some room. A wrong kernel or a
# broken cast gives errors of order 1.
TOLERANCES = {
    'fp32': (1e-4, 1e-3),
    'fp16': (1e-2, 2e-2),
    'bf16': (6e-2, 1e-1),
}
AUTOCAST_DTYPES = {'fp32': None, 'fp16': torch.float16, 'bf16': torch.bfloat16}

SDPA_KERNELS = {
    'aten::_scaled_dot_product_flash_attention': 'flash',
    'aten::_scaled_dot_product_efficient_attention': 'mem-efficient',
    'aten::_scaled_dot_product_cudnn_attention': 'cudnn',
    'aten::_scaled_dot_product_flash_attention_for_cpu': 'flash (CPU)',
    'aten::_scaled_dot_product_attention_math': 'math',
}


def record(record_property, result: str, **numbers) -> None:
    """Record one row of the summary: ``result`` is the text of its result column, ``numbers``
    go into the JSON report. Both go into the JUnit XML as JSON-encoded properties, which
    tools/analysis_tools/gpu_check.py reads; record before asserting, so a failed row keeps its
    numbers."""
    record_property('result', json.dumps(result))
    for key, value in numbers.items():
        record_property(key, json.dumps(value))


def autocast(device: str, precision: str):
    dtype = AUTOCAST_DTYPES[precision]
    return torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()


@contextlib.contextmanager
def no_tf32():
    """PyTorch's TF32 switches off, and restored afterwards (no driver or GPU setting)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def build_backbone(name: str):
    from mmengine.registry import MODELS  # the root registry every toolbox's MODELS reaches

    import cvt_mm  # noqa: F401  (registers the backbones)
    torch.manual_seed(0)
    model = MODELS.build(dict(BACKBONES[name]))
    model.init_weights()
    return model.eval()  # BN on running statistics and no drop path: a deterministic function


def forward_backward(model, x, weights, device: str, precision: str):
    """Outputs (fp32, on the CPU) and all gradients (parameters, then the input) flattened into
    one vector, of ``sum(out * weight)`` over the pyramid levels."""
    model = model.to(device)
    x = x.detach().clone().to(device).requires_grad_()
    with autocast(device, precision):
        outs = model(x)
    outs = [o.float() for o in outs]
    sum((o * w.to(device)).sum() for o, w in zip(outs, weights)).backward()
    grads = torch.cat([p.grad.float().flatten().cpu() for p in model.parameters()
                       if p.grad is not None] + [x.grad.float().flatten().cpu()])
    model.zero_grad(set_to_none=True)
    return [o.detach().cpu() for o in outs], grads


def parity_reference(name: str, shape) -> dict:
    """The CPU fp32 run every device run of ``name`` is compared with."""
    model = build_backbone(name)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen)
    with torch.no_grad():
        shapes = [o.shape for o in model(x)]
    weights = [torch.randn(s, generator=gen) for s in shapes]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    outs, grads = forward_backward(model, x, weights, 'cpu', 'fp32')
    return dict(name=name, x=x, weights=weights, state=state, outs=outs, grads=grads)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def parity_errors(outs, grads, reference: dict) -> tuple:
    """(worst relative L2 error over the outputs, relative L2 error of the gradients)."""
    out_err = max(relative_error(o, r) for o, r in zip(outs, reference['outs']))
    return out_err, relative_error(grads, reference['grads'])


def attention_kernels(model, x, train: bool, precision: str, device: str) -> dict:
    """{stage: {kernel: calls}} of one forward, read from the profiler's op events, with each
    stage's calls told apart by a record_function label around the stage."""
    from torch.profiler import ProfilerActivity, profile, record_function
    handles, active = [], {}
    for i, stage in enumerate(model.stages):
        def enter(module, args, i=i):
            active[i] = record_function(f'gpu_check_stage{i}')
            active[i].__enter__()

        def leave(module, args, output, i=i):
            active.pop(i).__exit__(None, None, None)
        handles += [stage.register_forward_pre_hook(enter), stage.register_forward_hook(leave)]
    model.train(train)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof, autocast(device, precision), \
                (contextlib.nullcontext() if train else torch.no_grad()):
            model(x)
    finally:
        for h in handles:
            h.remove()
    counts: dict = {}
    for event in prof.events():
        kernel = SDPA_KERNELS.get(event.name)
        if kernel is None:
            continue
        parent, stage = event.cpu_parent, '?'
        while parent is not None:
            match = re.fullmatch(r'gpu_check_stage(\d+)', parent.name)
            if match:
                stage = f's{match.group(1)}'
                break
            parent = parent.cpu_parent
        counts.setdefault(stage, {}).setdefault(kernel, 0)
        counts[stage][kernel] += 1
    return counts
