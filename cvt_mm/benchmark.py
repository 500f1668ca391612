"""Benchmarks of backbones, detector training iterations and classification training steps:
work, time, speed and peak memory, each case in its own process so its peak memory is its
own. ``tools/analysis_tools/benchmark.py`` is the command line; ``make gpu-check`` reuses the
timer and the memory reading.

One timer (:func:`time_steps`: wall seconds per call, the GPU synchronised) and one memory
unit (GiB: :func:`peak_memory_gib`, the process's peak resident set on the CPU, PyTorch's
peak allocation on a GPU) for everything.

Commands (``python tools/analysis_tools/benchmark.py COMMAND ...``):

* ``backbone``: a backbone per input size, mode (``infer``: eval forward under
  ``torch.no_grad()``; ``train``: forward, then backward of the sum of the outputs' means) and
  attention path; ``--compile`` adds ``torch.compile`` (inductor) for the train cases, its
  compilation reported apart; ``--vs-hf`` adds Hugging Face's CvT classifier at the same
  arch (:class:`HFCvtLogits`; path ``hf``) and ``--official PATH`` the official model run
  from a checkout (path ``official``; :mod:`cvt_mm.benchmark_peers`), each with its time over
  ours; ``--entry-points`` adds the same model through timm and transformers (paths ``timm``,
  ``hf-backbone``), each with its time over ours; ``--rounds N`` runs every case N times,
  alternated (ours, then the peers), and prints the medians and the peers' ratios from them.
* ``train-iter``: one training iteration of a head (``--head``: Mask R-CNN by default,
  Cascade Mask R-CNN, DINO 4-scale, Mask2Former on COCO and ADE20K, Semantic FPN) with
  CvT-13, CMT-S and the toolbox's Swin-T of that head, side by side (:data:`TRAIN_ITER_CONFIGS`;
  where the toolbox ships no Swin-T config of the head, one is constructed from its config of
  the head and its Swin-T backbone: :data:`SWIN_T_CONSTRUCTED`), at the head's training size
  (:data:`TRAIN_ITER_SIZES`): ``fwd s`` is data preprocessing, forward and losses, ``bwd s``
  the backward and the optimizer step; the ratios to Swin-T's time, work and peak memory.
* ``cls-step``: ``model.train_step`` of a classification config at its training resolution,
  with the config's batch augmentations, loss and optimizer.

Per case: ``GFLOP`` counted by :func:`cvt_mm.flops.count_flops` in one untimed pass (a
multiply-add is 2 FLOPs; attention included; mmcv's RoIAlign and the like not counted),
the median time over the timed runs after the warm-up, ``GFLOP/s`` = work over time, and
``--profile N`` the N operators with the most self CPU time, forward and backward apart,
and the matrix products' share of the profiled pass (:func:`profile_pass`); with peers, a
peer's ratio over that share bounds what we can gain by leaner code around the same products
(``at most`` in the medians table).
Backbone training cases also print ``held GiB``: what the forward keeps for the backward,
per stage, counted exactly by :func:`held_for_backward` (the peak resident set also holds
freed memory the allocator kept, so it moves by hundreds of MB between runs).
Every run first prints the machine's own fp32 GEMM rate and memory bandwidth, to read the
numbers against (machines of one kind differ by up to 2x).

Example::

    python tools/analysis_tools/benchmark.py backbone --model "dict(type='CMT', arch='s')" \\
        --sizes 800x1333 --modes infer train --profile 12
    python tools/analysis_tools/benchmark.py train-iter --models cvt13 swin_t --iters 2
    python tools/analysis_tools/benchmark.py train-iter --head sem_fpn --iters 2
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import os.path as osp
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, List, Optional

import torch

from .benchmark_peers import (
    PEER_NAMES,
    PEER_PATHS,
    HFCvtLogits,
    build_peer,
    hf_peer_config,
    official_family,
    peer_config,
)
from .engine.allocator import OPT_OUT_ENV, reuse_freed_memory

__all__ = ['time_steps', 'peak_memory_gib', 'held_for_backward', 'machine_rates',
           'HFCvtLogits', 'hf_peer_config', 'profile_pass', 'MATRIX_PRODUCT_OPERATORS',
           'case_env',
           'backbone_case', 'train_iteration_case', 'classification_step_case', 'main',
           'TRAIN_ITER_CONFIGS', 'TRAIN_ITER_SIZES', 'SWIN_T_CONSTRUCTED',
           'train_iter_config', 'our_config']

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
# Per head: our CvT-13 and CMT-S configs (by their path in a checkout: they are not installed
# with the package) and the toolbox's Swin-T config of the same head; a Swin-T config named
# 'constructed' is built from SWIN_T_CONSTRUCTED (the toolbox ships none for that head).
TRAIN_ITER_CONFIGS = {
    'mask_rcnn': {
        'cvt13': ('Mask R-CNN CvT-13', 'configs/mask_rcnn_cvt13_coco.py'),
        'cmt_s': ('Mask R-CNN CMT-S', 'configs/mask_rcnn_cmt_s_coco.py'),
        'swin_t': ('Mask R-CNN Swin-T (mmdet)',
                   'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py')},
    'cascade_mask_rcnn': {
        'cvt13': ('Cascade Mask R-CNN CvT-13', 'configs/cascade_mask_rcnn_cvt13_coco.py'),
        'cmt_s': ('Cascade Mask R-CNN CMT-S', 'configs/cascade_mask_rcnn_cmt_s_coco.py'),
        'swin_t': ('Cascade Mask R-CNN Swin-T (constructed)', 'constructed')},
    'dino_4scale': {
        'cvt13': ('DINO-4scale CvT-13', 'configs/dino_4scale_cvt13_12e_coco.py'),
        'cmt_s': ('DINO-4scale CMT-S', 'configs/dino_4scale_cmt_s_12e_coco.py'),
        'swin_t': ('DINO-4scale Swin-T (constructed)', 'constructed')},
    'mask2former_coco': {
        'cvt13': ('Mask2Former COCO CvT-13', 'configs/mask2former_cvt13_coco.py'),
        'cmt_s': ('Mask2Former COCO CMT-S', 'configs/mask2former_cmt_s_coco.py'),
        # Instance segmentation (its base is mask2former_r50_8xb2-lsj-50e_coco.py, as ours).
        'swin_t': ('Mask2Former COCO Swin-T (mmdet)',
                   'mmdet::mask2former/mask2former_swin-t-p4-w7-224_8xb2-lsj-50e_coco.py')},
    'mask2former_ade20k': {
        'cvt13': ('Mask2Former ADE20K CvT-13', 'configs/mask2former_cvt13_ade20k.py'),
        'cmt_s': ('Mask2Former ADE20K CMT-S', 'configs/mask2former_cmt_s_ade20k.py'),
        'swin_t': ('Mask2Former ADE20K Swin-T (mmseg)',
                   'mmseg::mask2former/mask2former_swin-t_8xb2-160k_ade20k-512x512.py')},
    'sem_fpn': {
        'cvt13': ('Semantic FPN CvT-13', 'configs/sem_fpn_cvt13_ade20k.py'),
        'cmt_s': ('Semantic FPN CMT-S', 'configs/sem_fpn_cmt_s_ade20k.py'),
        'swin_t': ('Semantic FPN Swin-T (constructed)', 'constructed')},
}
# Each head's training input (H, W), batch 1: the recipe's largest training size. Mask R-CNN,
# Cascade and DINO resize COCO to at most 1333x800 (DINO's multi-scale crops are smaller);
# Mask2Former COCO pads its large-scale-jitter crops to 1024x1024; ADE20K crops are 512x512.
TRAIN_ITER_SIZES = {'mask_rcnn': (800, 1333), 'cascade_mask_rcnn': (800, 1333),
                    'dino_4scale': (800, 1333), 'mask2former_coco': (1024, 1024),
                    'mask2former_ade20k': (512, 512), 'sem_fpn': (512, 512)}
# The toolbox's own Swin-T backbone dicts: MMDetection's (swin/mask-rcnn_swin-t-p4-w7_fpn_1x_
# coco.py) and MMSegmentation's (mask2former/mask2former_swin-t_8xb2-160k_ade20k-512x512.py).
SWIN_T_MMDET = dict(
    _delete_=True, type='SwinTransformer', embed_dims=96, depths=[2, 2, 6, 2],
    num_heads=[3, 6, 12, 24], window_size=7, mlp_ratio=4, qkv_bias=True, qk_scale=None,
    drop_rate=0., attn_drop_rate=0., drop_path_rate=0.2, patch_norm=True,
    out_indices=(0, 1, 2, 3), with_cp=False, convert_weights=True)
SWIN_T_MMSEG = dict({k: v for k, v in SWIN_T_MMDET.items() if k != 'convert_weights'},
                    drop_path_rate=0.3, frozen_stages=-1)
# Swin-T for the heads whose toolbox ships no Swin-T config: (the toolbox's config of the head,
# the delta). The delta swaps in the Swin-T backbone and the neck's input widths, nothing else,
# except Cascade's optimizer wrapper (below).
SWIN_T_CONSTRUCTED = {
    # ConvNeXt-T's cascade config: the same 4conv1fc GIoU box heads as ours. Its AMP wrapper
    # (CUDA only) and ConvNeXt layer decay become Swin-T Mask R-CNN's fp32 AdamW (ours too).
    'cascade_mask_rcnn': (
        'mmdet::convnext/cascade-mask-rcnn_convnext-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop-3x_'
        'coco.py',
        dict(model=dict(backbone=SWIN_T_MMDET, neck=dict(in_channels=[96, 192, 384, 768])),
             optim_wrapper=dict(
                 _delete_=True, type='OptimWrapper',
                 optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
                 paramwise_cfg=dict(custom_keys={
                     'absolute_pos_embed': dict(decay_mult=0.),
                     'relative_position_bias_table': dict(decay_mult=0.),
                     'norm': dict(decay_mult=0.)})))),
    # R-50's strides 8/16/32 (C3-C5) are Swin-T's stages 2-4, as mmdet's DINO Swin-L takes them.
    'dino_4scale': (
        'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py',
        dict(model=dict(backbone=dict(SWIN_T_MMDET, out_indices=(1, 2, 3)),
                        neck=dict(in_channels=[192, 384, 768])))),
    'sem_fpn': (
        'mmseg::sem_fpn/fpn_r50_4xb4-160k_ade20k-512x512.py',
        dict(model=dict(backbone=SWIN_T_MMSEG, neck=dict(in_channels=[96, 192, 384, 768])))),
}


def train_iter_config(head: str, key: str):
    """The config of one ``train-iter`` model: a file of ours (``configs/...``, found by
    :func:`our_config`), a toolbox's ``package::path``, or a constructed Swin-T Config.

    Args:
        head (str): a key of :data:`TRAIN_ITER_CONFIGS`, e.g. ``'sem_fpn'``.
        key (str): ``'cvt13'``, ``'cmt_s'`` or ``'swin_t'``.

    Returns:
        str | mmengine.Config: what :func:`train_iteration_case` takes.

    Example::

        >>> train_iter_config('sem_fpn', 'swin_t').model.backbone.type
        'SwinTransformer'
    """
    config = TRAIN_ITER_CONFIGS[head][key][1]
    if config != 'constructed':
        return our_config(config)
    from cvt_mm.builders import load_config
    base, delta = SWIN_T_CONSTRUCTED[head]
    cfg = load_config(base)
    cfg.merge_from_dict(copy.deepcopy(delta))
    return cfg


# ------------------------------------------------------------------------- measuring
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


def _record_profiles(result: dict, passes: dict) -> None:
    """Each pass's table as ``profile_<part>``, and the matrix products' share of them all."""
    for part, p in passes.items():
        result[f'profile_{part}'] = p['table']
    result['matrix_product_share'] = (sum(p['matrix_product_seconds'] for p in passes.values())
                                      / sum(p['seconds'] for p in passes.values()))


def our_config(path: str) -> str:
    """The file of one of our configs, ``configs/...`` in a checkout of cvt_mm: under the
    current folder, else in the checkout this module is imported from; a toolbox's
    ``package::path`` config is returned as it is. The configs are not installed with the
    package, so an installed cvt_mm finds them in the checkout it is run from.

    Raises:
        FileNotFoundError: naming the folders looked in.

    Example::

        >>> our_config('configs/mask_rcnn_cvt13_coco.py')  # from the checkout's root
        '/path/to/cvt_mm/configs/mask_rcnn_cvt13_coco.py'
    """
    if '::' in path:
        return path
    folders = list(dict.fromkeys([os.getcwd(), REPO]))
    for folder in folders:
        candidate = osp.join(folder, path)
        if osp.isfile(candidate):
            return candidate
    raise FileNotFoundError(f'{path} is in neither {" nor ".join(folders)}: run this from a '
                            'checkout of cvt_mm (its configs are not installed with the '
                            'package)')


def case_env(thp: bool) -> dict:
    """The environment of a case: as tools/train.py runs (PyTorch's default: no huge pages
    for CPU tensors), or with ``THP_MEM_ALLOC_ENABLE=1`` when ``thp``."""
    env = dict(os.environ)
    env.pop('THP_MEM_ALLOC_ENABLE', None)
    if thp:
        env['THP_MEM_ALLOC_ENABLE'] = '1'
    return env


def _default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


# ------------------------------------------------------------------------- cases
def backbone_case(model_cfg: dict, size, batch: int, mode: str, path: str, compiled: bool,
                  warmup: int, runs: int, threads: int, profile: int = 0) -> dict:
    """One backbone case (run inside its own process): see the module doc."""
    from cvt_mm.flops import count_flops
    from cvt_mm.registry import MODELS

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if model_cfg['type'] in ('HFCvtLogits', 'OfficialLogits', 'EntryPoint'):
        model = build_peer(model_cfg)
    else:
        model = MODELS.build(dict(model_cfg, fast_paths=path == 'sdpa'))
        model.init_weights()
    model.train(mode == 'train')
    x = torch.randn(batch, getattr(model, 'in_channels', 3), *size)
    model_gib = peak_memory_gib()
    net = torch.compile(model) if compiled else model

    def forward():
        if mode == 'infer':
            with torch.no_grad():
                return net(x)
        return net(x)

    def backward(outs):
        if mode == 'train':
            sum(o.float().mean() for o in outs).backward()
            model.zero_grad(set_to_none=True)

    result = dict(compile_s=None, params_m=sum(p.numel() for p in model.parameters()) / 1e6)
    if compiled:  # the first call compiles: reported apart from the steady-state times
        result['compile_s'] = time_steps(lambda: backward(forward()), 0, 1)[0]
    held = {}
    fwd_times = time_steps(lambda: held.update(outs=forward()), warmup, runs) if \
        mode == 'infer' else None
    if mode == 'train':  # forward and backward timed apart, on the same outputs
        fwd_times, bwd_times = [], []
        for i in range(warmup + runs):
            forward_s = time_steps(lambda: held.update(outs=forward()), 0, 1)[0]
            backward_s = time_steps(lambda: backward(held.pop('outs')), 0, 1)[0]
            if i >= warmup:
                fwd_times.append(forward_s)
                bwd_times.append(backward_s)
    held.clear()
    peak_gib = peak_memory_gib()  # before the count, whose module tracker holds graphs longer
    if mode == 'train' and not compiled:
        parts, outs = held_for_backward(model, x)
        backward(outs)
        result['held_gib'] = {k: v / 2 ** 30 for k, v in parts.items()}
    fwd_flops = count_flops(forward)  # infer: under no_grad, as timed
    total_flops = count_flops(lambda: backward(forward())) if mode == 'train' else fwd_flops
    result.update(fwd_s=statistics.median(fwd_times),
                  bwd_s=statistics.median(bwd_times) if mode == 'train' else None,
                  gflop=total_flops.gflops, fwd_gflop=fwd_flops.gflops,
                  attention_share=fwd_flops.attention_share(), peak_gib=peak_gib,
                  model_gib=model_gib)
    result['gflops_per_s'] = result['gflop'] / (result['fwd_s'] + (result['bwd_s'] or 0))
    if profile:
        passes = dict(forward=profile_pass(lambda: held.update(outs=forward()), profile))
        if mode == 'train':
            passes['backward'] = profile_pass(lambda: backward(held.pop('outs')), profile)
        _record_profiles(result, passes)
    return result


def _pad_to(cfg, size) -> None:
    """Set the config's fixed-size padding to ``size`` (MMSegmentation's data preprocessor
    ``size``, MMDetection's ``BatchFixedSizePad``): at the recipe's size a no-op; at a smaller
    ``--size`` the input is not padded back up to the recipe's crop."""
    for pre in (cfg.model.get('data_preprocessor'), cfg.get('data_preprocessor')):
        if not pre:
            continue
        if pre.get('size') is not None:
            pre['size'] = tuple(size)
        for aug in pre.get('batch_augments') or ():
            if aug.get('type') == 'BatchFixedSizePad':
                aug['size'] = tuple(size)


def train_iteration_case(config, size, iters: int, threads: int, profile: int = 0) -> dict:
    """One training iteration of a detector or segmentor config (run inside its own process):
    batch 1 of a random ``size`` picture with, for its task, five boxes and masks (MMDetection)
    or a label map (MMSegmentation), through the config's own data preprocessor (its fixed-size
    padding set to ``size``), random backbone weights; one warm-up iteration, then ``iters``
    timed.

    Args:
        config (str | mmengine.Config): a config file, ``package::path`` or loaded Config.
        size (tuple[int, int]): input (H, W).
        iters (int): timed iterations.
        threads (int): torch CPU threads.
        profile (int): top operators to keep per pass (0: none).

    Returns:
        dict: ``fwd_s``, ``bwd_s`` (medians), ``gflop``, ``peak_gib``, ``loss``,
        ``params_m``, ``backbone`` (the backbone's class name), ``task``, ``load_1min`` (the
        machine's 1-minute load average at the end).

    Example::

        >>> r = train_iteration_case('configs/sem_fpn_cvt13_ade20k.py', (128, 128), 1, 2)
        >>> r['backbone'], r['task']
        ('CvT', 'mmseg')
    """
    from mmengine.optim import build_optim_wrapper

    from cvt_mm.builders import build_model_from_config, load_config, synthetic_batch, task_of
    from cvt_mm.flops import count_flops

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = load_config(config)
    _pad_to(cfg, size)
    model = build_model_from_config(cfg)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    task = task_of(cfg)
    batch = synthetic_batch(model, batch_size=1, height=size[0], width=size[1], num_objects=5,
                            task=task)

    # MMEngine's BaseModel.train_step, split where the backward starts.
    def forward():
        with optim_wrapper.optim_context(model):
            data = model.data_preprocessor(batch, True)
            return model.parse_losses(model._run_forward(data, mode='loss'))

    held = {}
    fwd, bwd = [], []
    for i in range(iters + 1):  # the first iteration warms up allocators and caches
        forward_s = time_steps(lambda: held.update(out=forward()), 0, 1)[0]
        backward_s = time_steps(lambda: optim_wrapper.update_params(held['out'][0]), 0, 1)[0]
        if i:
            fwd.append(forward_s)
            bwd.append(backward_s)
    loss = float(held.pop('out')[1]['loss'])
    peak_gib = peak_memory_gib()  # before the count, whose module tracker holds graphs longer
    work = count_flops(lambda: optim_wrapper.update_params(forward()[0]))
    result = dict(fwd_s=statistics.median(fwd), bwd_s=statistics.median(bwd),
                  gflop=work.gflops, peak_gib=peak_gib, loss=loss,
                  params_m=sum(p.numel() for p in model.parameters()) / 1e6,
                  backbone=type(model.backbone).__name__, task=task,
                  load_1min=os.getloadavg()[0])  # the machine's load while this case ran
    if profile:
        _record_profiles(result, dict(
            forward=profile_pass(lambda: held.update(out=forward()), profile),
            backward=profile_pass(lambda: optim_wrapper.update_params(held.pop('out')[0]),
                                  profile)))
    return result


def _train_resolution(cfg) -> int:
    for t in cfg.train_dataloader.dataset.pipeline:
        if t['type'] == 'RandomResizedCrop':
            return int(t['scale'])
    raise ValueError('the config has no RandomResizedCrop in its training pipeline; '
                     'pass --size')


def classification_step_case(config: str, batch_size: int, size: Optional[int], warmup: int,
                             iters: int) -> dict:
    """``model.train_step`` of a classification config (preprocessing with the config's
    Mixup/CutMix, forward, loss, backward, optimizer step) on a synthetic batch at the
    config's training resolution. Image decoding and per-image augmentations, which run in
    dataloader workers, are not included."""
    from mmengine.optim import build_optim_wrapper

    from cvt_mm.builders import build_model_from_config, load_config, synthetic_batch

    if batch_size < 1 or iters < 1 or warmup < 0:
        raise ValueError(f'need batch_size >= 1, iters >= 1, warmup >= 0; got {batch_size}, '
                         f'{iters}, {warmup}')
    cfg = load_config(config)
    size = size or _train_resolution(cfg)
    torch.manual_seed(0)
    model = build_model_from_config(cfg)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    data = synthetic_batch(model, batch_size, size, size, task='mmpretrain')
    held = {}
    times = time_steps(lambda: held.update(losses=model.train_step(data, optim_wrapper)),
                       warmup, iters)
    loss = sum(v.item() for k, v in held['losses'].items() if 'loss' in k)
    return dict(size=size, median=statistics.median(times), min=min(times), max=max(times),
                loss=loss, peak_gib=peak_memory_gib())


# ------------------------------------------------------------------------- command line
def _parse_size(text: str):
    try:
        h, w = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'size must look like 224x224 (HxW), got {text!r}')
    if h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f'size must be positive, got {text!r}')
    return h, w


def _parse_model(text: str) -> dict:
    """A ``dict(...)`` or ``{...}`` literal of plain values (no names other than dict)."""
    try:
        cfg = eval(text, {'__builtins__': {}, 'dict': dict, 'True': True, 'False': False,
                          'None': None})
    except Exception as err:  # noqa: BLE001 - any parse failure is the user's input
        raise argparse.ArgumentTypeError(f'cannot parse --model {text!r}: {err}')
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise argparse.ArgumentTypeError(f'--model must be a dict with a type, got {text!r}')
    return cfg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='benchmark.py', description='Work, time, speed and peak memory of backbones, '
        'detector and segmentor training iterations and classification training steps.')
    sub = parser.add_subparsers(dest='command', required=True)

    b = sub.add_parser('backbone', help='a backbone per size, mode and attention path')
    b.add_argument('--model', required=True, type=_parse_model,
                   help='backbone config, e.g. "dict(type=\'CvT\', arch=\'13\')"')
    b.add_argument('--sizes', nargs='+', type=_parse_size, default=[(224, 224)],
                   help='input sizes HxW')
    b.add_argument('--batch', type=int, default=1)
    b.add_argument('--modes', nargs='+', choices=('infer', 'train'), default=['infer'],
                   help='infer: eval forward without grad; train: forward + backward')
    b.add_argument('--paths', nargs='+', choices=('sdpa', 'reference'), default=['sdpa'],
                   help='sdpa: the fast paths (fused attention and the rest of '
                   'cvt_mm.models.fast); reference: the formulas as written, for comparison')
    b.add_argument('--compile', action='store_true',
                   help='also time train cases under torch.compile (inductor)')
    b.add_argument('--vs-hf', action='store_true',
                   help="also time Hugging Face's CvtForImageClassification at the same arch "
                   "(--model a CvT with out_type='logits'; needs transformers) and print "
                   'its time over ours')
    b.add_argument('--entry-points', action='store_true',
                   help='also time the same model through timm (timm.create_model, '
                   'features_only for maps) and transformers (AutoModel on our backbone '
                   'config; maps only), --model a CvT or CMT with a named arch, and print '
                   'each time over ours')
    b.add_argument('--official', metavar='PATH',
                   help='also time the official model at the same arch (--model a CvT or CMT '
                   "with out_type='logits'), run from PATH, the root of a checkout of "
                   'microsoft/CvT or huawei-noah/Efficient-AI-Backbones (needs timm), and print '
                   'its time over ours')
    b.add_argument('--warmup', type=int, default=1)
    b.add_argument('--runs', type=int, default=3, help='timed runs per case, after the warm-up')
    b.add_argument('--rounds', type=int, default=1,
                   help='run every case this many times, each in its own process, alternated '
                   '(ours, then the peers, per size and mode), and print the medians and the '
                   "peers' ratios from them")
    b.add_argument('--threads', type=int, default=_default_threads())

    t = sub.add_parser('train-iter', help='one detector or segmentor training iteration per '
                       'model of a head, beside Swin-T')
    t.add_argument('--head', choices=tuple(TRAIN_ITER_CONFIGS), default='mask_rcnn',
                   help='the head (default: mask_rcnn); its CvT-13, CMT-S and Swin-T configs')
    t.add_argument('--models', nargs='+', choices=('cvt13', 'cmt_s', 'swin_t'),
                   default=['cvt13', 'cmt_s', 'swin_t'])
    t.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'),
                   help="image size (default: the head's training size, 800 1333 for Mask "
                   'R-CNN; TRAIN_ITER_SIZES)')
    t.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    t.add_argument('--iters', type=int, default=2, help='timed iterations (after 1 warm-up)')

    c = sub.add_parser('cls-step', help='a classification training step')
    c.add_argument('configs', nargs='+', help='classification config files')
    c.add_argument('--batch-size', type=int, default=8)
    c.add_argument('--size', type=int, help="input size (default: the config's crop)")
    c.add_argument('--warmup', type=int, default=1, help='untimed iterations first')
    c.add_argument('--iters', type=int, default=5, help='timed iterations')
    for p in (b, t):
        p.add_argument('--profile', type=int, default=0, metavar='N',
                       help='print the N operators with the most self CPU time per case, '
                       "and the matrix products' share of the profiled pass (with peers: "
                       "'at most', the bound it puts on peer / ours)")
        p.add_argument('--thp', action='store_true',
                       help='with THP_MEM_ALLOC_ENABLE=1: huge pages for large CPU tensors '
                       '(slower and larger at 224 in docs/benchmarks.md; tools/train.py does '
                       'not set it)')
        p.add_argument('--json', help='also write the results to this file')
        p.add_argument('--case', help=argparse.SUPPRESS)  # internal: run one case
    return parser


def _run_case(argv: List[str], case, thp: bool) -> subprocess.CompletedProcess:
    """``argv`` with ``--case`` in a fresh process (``python -m cvt_mm.benchmark``)."""
    return subprocess.run([sys.executable, '-m', 'cvt_mm.benchmark', *argv, '--case',
                           json.dumps(case)], capture_output=True, text=True,
                          env=case_env(thp), cwd=REPO)


def _print_machine(threads: int, thp: bool) -> dict:
    rates = machine_rates(threads)
    print(f'this machine now: fp32 GEMM {rates["gemm_gflops_per_s"]:.0f} GFLOP/s, memory copy '
          f'{rates["copy_gb_per_s"]:.1f} GB/s; THP_MEM_ALLOC_ENABLE={1 if thp else 0}; '
          f'{OPT_OUT_ENV}={os.environ.get(OPT_OUT_ENV, "reuse")}; '
          f'{threads} threads; load average '
          f'{" ".join(f"{v:.2f}" for v in os.getloadavg())}', flush=True)
    return rates


def _failure(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode in (-9, 137):
        return 'killed (likely out of memory)'
    return ' '.join(proc.stderr.strip().splitlines()[-1:])


def _write_json(path: Optional[str], **fields) -> None:
    """The ``--json`` file of a subcommand, when one was asked for."""
    if path:
        with open(path, 'w') as f:
            json.dump(fields, f, indent=1)


def _eager_result(results: List[dict], size: str, path: str, mode: str) -> Optional[dict]:
    """The eager (not compiled) result of one size, attention path and mode, if run."""
    return next((r for r in results if (r['size'], r['path'], r['mode']) == (size, path, mode)
                 and not r['compiled']), None)


def _peer_ratio(res: dict, ours: Optional[dict]) -> Optional[float]:
    """A peer's wall time (forward + backward) over ours: > 1 is ours ahead."""
    if not ours:
        return None
    return (res['fwd_s'] + (res['bwd_s'] or 0)) / (ours['fwd_s'] + (ours['bwd_s'] or 0))


def _median_of_rounds(runs: List[dict]) -> dict:
    """One case's result over its rounds: the first round's, with the medians of the times
    (the wall time's median of its own: fwd + bwd per round, then the median)."""
    res = dict(runs[0])
    walls = [r['fwd_s'] + (r['bwd_s'] or 0) for r in runs]
    res['round_wall_s'] = walls
    if len(runs) > 1:
        res['fwd_s'] = statistics.median(r['fwd_s'] for r in runs)
        if res['bwd_s'] is not None:
            res['bwd_s'] = statistics.median(r['bwd_s'] for r in runs)
        res['peak_gib'] = statistics.median(r['peak_gib'] for r in runs)
    res['wall_s'] = statistics.median(walls)
    res['gflops_per_s'] = res['gflop'] / res['wall_s']
    return res


def _backbone_line(res: dict, label: str, path: str, mode_label: str) -> str:
    bwd = f'{res["bwd_s"]:7.2f}' if res['bwd_s'] is not None else f'{"-":>7}'
    line = (f'{label:>9} {path:>11} {mode_label:>13} {res["gflop"]:8.1f} '
            f'{res["fwd_s"]:7.2f} {bwd} {res["gflops_per_s"]:8.1f} '
            f'{res["peak_gib"]:9.2f} {res["model_gib"]:10.2f}')
    if res.get('held_gib'):
        line += (f' {sum(res["held_gib"].values()):9.2f}  (' + ', '.join(
            f'{k} {v:.2f}' for k, v in res['held_gib'].items()) + ')')
    return line


def _backbone(args) -> int:
    common = ['backbone', '--model', repr(args.model), '--batch', str(args.batch), '--warmup',
              str(args.warmup), '--runs', str(args.runs), '--threads', str(args.threads)]
    if args.official:
        common += ['--official', args.official]
    if args.case:
        size, path, mode, compiled = json.loads(args.case)
        model_cfg = peer_config(path, args.model, size, args.official) \
            if path in PEER_PATHS else args.model
        print(json.dumps(backbone_case(model_cfg, size, args.batch, mode, path, compiled,
                                       args.warmup, args.runs, args.threads, args.profile)))
        return 0
    peers = (['hf'] if args.vs_hf else []) + (['official'] if args.official else [])
    if args.entry_points:
        peers += ['timm'] + ([] if args.model.get('out_type') == 'logits' else ['hf-backbone'])
    try:  # what the peers cannot run is said before anything runs
        for peer in peers:
            for size in args.sizes:
                peer_config(peer, args.model, size, args.official)
        if args.official and importlib.util.find_spec('timm') is None:
            raise ImportError(f'--official runs the official {official_family(args.official)} '
                              'code, which imports timm: pip install -e .[peers]')
    except (ValueError, ImportError) as err:
        raise SystemExit(f'benchmark.py backbone: {err}')
    # Each round runs every case once, each in its own process: ours, then the peers, per
    # size and mode, so that a noisy machine slows both sides alike.
    cases = [(size, path, mode, False) for size in args.sizes for mode in args.modes
             for path in args.paths + peers]
    if args.compile:
        cases += [(size, path, 'train', True) for size in args.sizes for path in args.paths]
    print(f'model: {args.model}  batch: {args.batch}' + (
        f'  rounds: {args.rounds} (each case in its own process, ours then the peers)'
        if args.rounds > 1 else ''))
    rates = _print_machine(args.threads, args.thp)
    header = (f'{"size":>9} {"path":>11} {"mode":>13} {"GFLOP":>8} {"fwd s":>7} {"bwd s":>7} '
              f'{"GFLOP/s":>8} {"peak GiB":>9} {"model GiB":>10} {"held GiB":>9}')
    runs, lines = {}, [header]
    print(header, flush=True)
    for round_ in range(args.rounds):
        done = {}  # this round's results, for its own ratios
        for case in cases:
            size, path, mode, compiled = case
            label, mode_label = f'{size[0]}x{size[1]}', mode + (' compiled' if compiled else '')
            profile = args.profile if round_ == 0 else 0  # the first round's profiles only
            proc = _run_case(common + ['--profile', str(profile)],
                             [size, path, mode, compiled], args.thp)
            prefix = f'round {round_ + 1}: ' if args.rounds > 1 else ''
            if proc.returncode != 0:
                lines.append(f'{prefix}{label:>9} {path:>11} {mode_label:>13} failed: exit '
                             f'{proc.returncode}, {_failure(proc)}')
                print(lines[-1], flush=True)
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res.update(size=label, path=path, mode=mode, compiled=compiled)
            runs.setdefault(tuple(map(str, case)), []).append(res)
            done[(label, path, mode, compiled)] = res
            lines.append(prefix + _backbone_line(res, label, path, mode_label))
            ratio = _peer_ratio(res, done.get((label, 'sdpa', mode, False))) \
                if path in PEER_PATHS else None
            if ratio:  # a peer's time over ours: > 1 is ours ahead
                lines[-1] += f'  ({PEER_NAMES[path]} / ours: {ratio:.2f}x the time)'
            if res.get('matrix_product_share'):
                lines[-1] += f'  (matrix products {res["matrix_product_share"]:.0%} of it)'
            if compiled and (label, path, 'train', False) in done:
                eager = done[(label, path, 'train', False)]
                speedup = (eager['fwd_s'] + eager['bwd_s']) / (res['fwd_s'] + res['bwd_s'])
                lines[-1] += f'  (compiled in {res["compile_s"]:.0f} s; {speedup:.2f}x eager)'
            for part in ('forward', 'backward'):
                if res.get(f'profile_{part}'):
                    print(f'{label} {path} {mode_label}: top operators, {part}\n'
                          f'{res[f"profile_{part}"]}')
            print(lines[-1], flush=True)
    results = [_median_of_rounds(r) for r in runs.values()]
    for res in results:
        if res['path'] in PEER_PATHS:
            ours = _eager_result(results, res['size'], 'sdpa', res['mode'])
            if ours:
                res['peer_over_ours'] = _peer_ratio(res, ours) if args.rounds == 1 else \
                    res['wall_s'] / ours['wall_s']
                res[f'{res["path"]}_over_ours'] = res['peer_over_ours']
                if ours.get('matrix_product_share'):  # were all but our products gone
                    res['peer_over_ours_bound'] = (res['peer_over_ours']
                                                   / ours['matrix_product_share'])
        if res['compiled']:
            eager = _eager_result(results, res['size'], res['path'], 'train')
            if eager:
                res['speedup'] = eager['wall_s'] / res['wall_s']
    if args.rounds > 1:  # the medians, and the peers' ratios from them
        lines += ['', f'medians of {args.rounds} rounds ({rates["gemm_gflops_per_s"]:.0f} GFLOP/s '
                  f'fp32 GEMM; load average {" ".join(f"{v:.2f}" for v in os.getloadavg())} '
                  'at the end); peer / ours: the median time of the peer over ours, > 1 is '
                  'ours ahead', header]
        for res in results:
            mode_label = res['mode'] + (' compiled' if res['compiled'] else '')
            lines.append(_backbone_line(res, res['size'], res['path'], mode_label)
                         + f'  params {res["params_m"]:.2f}M')
            if res.get('peer_over_ours'):
                lines[-1] += f'  peer / ours {res["peer_over_ours"]:.2f}'
            if res.get('peer_over_ours_bound'):
                lines[-1] += f' (at most {res["peer_over_ours_bound"]:.2f})'
            if res.get('speedup'):
                lines[-1] += f'  {res["speedup"]:.2f}x eager'
        print('\n'.join(lines[-len(results) - 3:]), flush=True)
    elif args.profile:  # the table again, together, after the profiles
        print('\n' + '\n'.join(lines))
    _write_json(args.json, model=args.model, threads=args.threads, batch=args.batch,
                rounds=args.rounds, official=args.official, machine=rates, results=results)
    return 0


def _train_iter(args) -> int:
    size = args.size or TRAIN_ITER_SIZES[args.head]
    if args.case:
        head, key, file = json.loads(args.case)
        config = file or train_iter_config(head, key)  # constructed: built in this process
        print(json.dumps(train_iteration_case(config, size, args.iters, args.threads,
                                              args.profile)))
        return 0
    models = TRAIN_ITER_CONFIGS[args.head]
    try:  # our files are looked up here, where the checkout is; constructed ones in the case
        files = {key: None if models[key][1] == 'constructed' else
                 train_iter_config(args.head, key) for key in args.models}
    except FileNotFoundError as err:
        raise SystemExit(f'benchmark.py train-iter: {err}')
    rates = _print_machine(args.threads, args.thp)
    print(f'{args.head}: one training iteration, batch 1, {size[0]}x{size[1]}, median of '
          f'{args.iters} after a warm-up')
    for key in args.models:
        if models[key][1] == 'constructed':
            base = SWIN_T_CONSTRUCTED[args.head][0]
            print(f'{models[key][0]}: constructed (the toolbox ships no Swin-T config of this '
                  f"head): {base} with the toolbox's Swin-T backbone")
    results = {}
    for key in args.models:
        name, config = models[key]
        proc = _run_case(['train-iter', '--size', *map(str, size), '--iters',
                          str(args.iters), '--threads', str(args.threads), '--profile',
                          str(args.profile)], [args.head, key, files[key]], args.thp)
        if proc.returncode:
            raise RuntimeError(f'{name} ({config}) failed ({_failure(proc)}):\n'
                               f'{proc.stderr[-3000:]}')
        results[key] = r = json.loads(proc.stdout.strip().splitlines()[-1])
        r.update(name=name, config=SWIN_T_CONSTRUCTED[args.head][0] + ' + Swin-T'
                 if config == 'constructed' else config, constructed=config == 'constructed',
                 wall_s=r['fwd_s'] + r['bwd_s'])
        r['gflops_per_s'] = r['gflop'] / r['wall_s']
        for part in ('forward', 'backward'):
            if r.get(f'profile_{part}'):
                print(f'\n{name}: top operators, {part}\n{r[f"profile_{part}"]}', flush=True)
        if r.get('matrix_product_share'):
            print(f'{name}: matrix products {r["matrix_product_share"]:.0%} of the profiled '
                  'iteration', flush=True)
    width = max(27, *(len(r['name']) for r in results.values()))
    print(f'\n{"model":{width}s} {"params":>7s} {"GFLOP":>7s} {"fwd s":>6s} {"bwd s":>6s} '
          f'{"wall s":>6s} {"GFLOP/s":>7s} {"peak GiB":>9s} {"load":>5s}  vs Swin-T: time, '
          'work, memory')
    ref = results.get('swin_t')
    for key, r in results.items():
        line = (f'{r["name"]:{width}s} {r["params_m"]:6.1f}M {r["gflop"]:7.0f} '
                f'{r["fwd_s"]:6.1f} {r["bwd_s"]:6.1f} {r["wall_s"]:6.1f} '
                f'{r["gflops_per_s"]:7.1f} {r["peak_gib"]:9.2f} {r["load_1min"]:5.1f}')
        if ref and key != 'swin_t':
            r['time_ratio'] = r['wall_s'] / ref['wall_s']
            r['work_ratio'] = r['gflop'] / ref['gflop']
            r['memory_ratio'] = r['peak_gib'] / ref['peak_gib']
            line += f'  {r["time_ratio"]:.2f}, {r["work_ratio"]:.2f}, {r["memory_ratio"]:.2f}'
        print(line)
    print(f'load average at the end {" ".join(f"{v:.2f}" for v in os.getloadavg())}')
    _write_json(args.json, head=args.head, size=list(size), threads=args.threads,
                iters=args.iters, machine=rates, results=results)
    return 0


def _cls_step(args) -> int:
    print(f'torch {torch.__version__}, {torch.get_num_threads()} CPU threads')
    for config in args.configs:
        r = classification_step_case(config, args.batch_size, args.size, args.warmup,
                                     args.iters)
        print(f'{osp.basename(config)}: batch {args.batch_size} x {r["size"]}x{r["size"]}: '
              f'{r["median"]:.2f} s/iter median of {args.iters} '
              f'(min {r["min"]:.2f}, max {r["max"]:.2f}); last loss {r["loss"]:.3f}; peak '
              f'{r["peak_gib"]:.2f} GiB')
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, 'case', None) or args.command == 'cls-step':
        reuse_freed_memory()  # where models run: as tools/train.py runs them
    if args.command == 'backbone':
        if args.warmup < 0 or args.runs < 1 or args.batch < 1 or args.profile < 0 or \
                args.rounds < 1:
            parser.error('--warmup and --profile must be >= 0, --runs, --rounds and --batch '
                         '>= 1')
        return _backbone(args)
    if args.command == 'train-iter':
        if args.threads < 1 or args.iters < 1 or args.profile < 0 or \
                (args.size and min(args.size) < 64):
            parser.error('--threads and --iters must be >= 1, --profile >= 0, --size >= 64')
        return _train_iter(args)
    return _cls_step(args)


if __name__ == '__main__':
    sys.exit(main())
