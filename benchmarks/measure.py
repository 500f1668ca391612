"""The measurements every benchmark case shares: one timer (:func:`time_steps`: wall seconds
per call, the GPU synchronised), one memory unit (GiB: :func:`peak_memory_gib`, the process's
peak resident set on the CPU, PyTorch's peak allocation on a GPU), what a forward keeps for
its backward (:func:`held_for_backward`), the machine's own GEMM rate and memory bandwidth
(:func:`machine_rates`) and where the time goes (:func:`profile_pass`). ``make gpu-check``
reuses the timer and the memory reading."""
from __future__ import annotations

import resource
import time
from typing import Callable, List

import torch

__all__ = ['time_steps', 'peak_memory_gib', 'held_for_backward', 'machine_rates',
           'profile_pass', 'record_profiles', 'MATRIX_PRODUCT_OPERATORS']


def time_steps(step: Callable[[], object], warmup: int, runs: int,
               device: str = 'cpu') -> List[float]:
    """Wall seconds of each of ``runs`` calls of ``step`` after ``warmup`` untimed ones (the
    GPU synchronised around each timed call on ``'cuda'``).

    Example::

        >>> times = time_steps(lambda: model(x), warmup=1, runs=3)
        >>> statistics.median(times)
    """
    cuda = device == 'cuda'
    times = []
    for i in range(warmup + runs):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def peak_memory_gib(device: str = 'cpu') -> float:
    """Peak memory so far in GiB: the process's maximum resident set (interpreter,
    libraries and weights included) on the CPU, PyTorch's peak allocation on ``'cuda'``."""
    if device == 'cuda':
        return torch.cuda.max_memory_allocated() / 2 ** 30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


def held_for_backward(model: torch.nn.Module, *args, by: str = 'part') -> tuple:
    """What a training forward of ``model(*args)`` leaves held for the backward, in bytes:
    every storage an operator writes during the forward, counted once, if it is still alive
    when the forward returns and is not one of the outputs. Exact, unlike the resident set,
    which also holds memory the allocator kept after freeing it.

    Args:
        model (nn.Module): in training mode, so that the forward builds its graph.
        *args: the forward's inputs.
        by (str): ``'part'`` (default): per part of a backbone with ``stages``,
            ``{'stem': ..., 'stage1': ..., 'rest': ...}`` (``'stem'`` before the first stage,
            ``'rest'`` after the last; only ``'rest'`` without stages); ``'operator'``: per
            operator that wrote the storage, ``{torch.ops.aten.gelu: ..., ...}``.

    Returns:
        tuple: ``(held, outputs)``, the outputs for the caller's backward.

    Example::

        >>> held, outs = held_for_backward(CMT(arch='s', num_classes=0).train(), x)
        >>> {part: n / 2 ** 20 for part, n in held.items()}    # MiB
    """
    if by not in ('part', 'operator'):
        raise ValueError(f"by must be 'part' or 'operator', got {by!r}")
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    written = {}  # data_ptr -> (weak storage, bytes, part or operator)
    part = ['stem' if hasattr(model, 'stages') else 'rest']

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type != 'meta':
                    storage = t.untyped_storage()
                    old = written.get(storage.data_ptr())
                    if old is None or old[0].expired():  # a freed address can be reused
                        written[storage.data_ptr()] = (
                            StorageWeakRef(storage), storage.nbytes(),
                            part[0] if by == 'part' else func.overloadpacket)
            return out

    hooks = [stage.register_forward_pre_hook(lambda *_, i=i: part.__setitem__(0, f'stage{i}'))
             for i, stage in enumerate(getattr(model, 'stages', ()), 1)]
    if hooks:
        hooks.append(model.stages[-1].register_forward_hook(
            lambda *_: part.__setitem__(0, 'rest')))
    try:
        with Record():
            outs = model(*args)
    finally:
        for h in hooks:
            h.remove()
    outputs = {t.untyped_storage().data_ptr() for t in tree_flatten(outs)[0]
               if isinstance(t, torch.Tensor)}
    stages = len(getattr(model, 'stages', ()))
    held = dict.fromkeys(['stem', *(f'stage{i}' for i in range(1, stages + 1)), 'rest'], 0) \
        if stages and by == 'part' else {}
    for ptr, (ref, nbytes, where) in written.items():
        if not ref.expired() and ptr not in outputs:
            held[where] = held.get(where, 0) + nbytes
    return held, outs


def machine_rates(threads: int) -> dict:
    """This machine's limits, measured now: fp32 GEMM GFLOP/s (2048^3, best of 3) and the
    memory bandwidth of a 256 MiB copy (GB/s read + written, best of 3). A model's GFLOP/s
    are read against the first; element-wise operators are bound by the second."""
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    src, dst = torch.randn(2 ** 26), torch.empty(2 ** 26)
    gemm = [2 * 2048 ** 3 / t / 1e9 for t in time_steps(lambda: torch.mm(a, b), 0, 3)]
    copy = [2 * src.numel() * 4 / t / 1e9 for t in time_steps(lambda: dst.copy_(src), 0, 3)]
    return dict(gemm_gflops_per_s=max(gemm), copy_gb_per_s=max(copy))


# Profiler keys whose time is matrix products: GEMMs, batched GEMMs, and PyTorch's fused CPU
# attention (blocked GEMMs with the softmax between them, counted whole). Convolutions count
# when dense (a 1x1 convolution is a GEMM; oneDNN computes the others as blocked GEMMs too),
# not when depth-wise (memory-bound): see :func:`profile_pass`.
MATRIX_PRODUCT_OPERATORS = frozenset({
    'aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm',
    'aten::_scaled_dot_product_flash_attention_for_cpu',
    'aten::_scaled_dot_product_flash_attention_for_cpu_backward'})
# Convolution operators with self time, and where their weight is among the inputs (oneDNN's,
# and PyTorch's own, which it takes with one thread).
_CONVOLUTION_WEIGHT_INPUT = {'aten::mkldnn_convolution': 1, 'aten::convolution_backward': 2,
                             'aten::_slow_conv2d_forward': 1, 'aten::_slow_conv2d_backward': 2}


def _is_matrix_product(event) -> bool:
    """Whether a profiler average (grouped by input shapes) is a matrix product."""
    if event.key in MATRIX_PRODUCT_OPERATORS:
        return True
    index = _CONVOLUTION_WEIGHT_INPUT.get(event.key)
    if index is None or len(event.input_shapes) <= index:
        return False
    weight = event.input_shapes[index]  # (out, in / groups, kh, kw)
    return len(weight) == 4 and weight[1] > 1


def profile_pass(fn: Callable[[], object], count: int) -> dict:
    """One call of ``fn`` under ``torch.profiler`` (input shapes recorded).

    Returns:
        dict: ``table`` (str), the ``count`` operators with the most self CPU time;
        ``seconds`` (float), all the operators' self CPU time; ``matrix_product_seconds``
        (float), that of the matrix products (:data:`MATRIX_PRODUCT_OPERATORS` and dense
        convolutions). Their ratio bounds what leaner code around the same products can
        gain: the products run at the library's rate on every side.

    Example::

        >>> a = torch.randn(512, 512)
        >>> p = profile_pass(lambda: (a @ a).relu(), count=3)
        >>> 0 < p['matrix_product_seconds'] <= p['seconds']
        True
    """
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    by_shape = prof.key_averages(group_by_input_shape=True)
    return dict(
        table=prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=count,
                                        max_name_column_width=48),
        seconds=sum(e.self_cpu_time_total for e in by_shape) / 1e6,
        matrix_product_seconds=sum(e.self_cpu_time_total for e in by_shape
                                   if _is_matrix_product(e)) / 1e6)


def record_profiles(result: dict, passes: dict) -> None:
    """Each pass's table as ``profile_<part>``, and the matrix products' share of them all."""
    for part, p in passes.items():
        result[f'profile_{part}'] = p['table']
    result['matrix_product_share'] = (sum(p['matrix_product_seconds'] for p in passes.values())
                                      / sum(p['seconds'] for p in passes.values()))
