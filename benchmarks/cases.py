"""The benchmark cases, each run in a process of its own (:mod:`benchmarks.cli` starts them):
a backbone (:func:`backbone_case`), a detector's or segmentor's training iteration beside the
toolbox's Swin-T of the same head (:func:`train_iteration_case`, :data:`TRAIN_ITER_CONFIGS`)
and a classification training step (:func:`classification_step_case`)."""
from __future__ import annotations

import copy
import os
import os.path as osp
import statistics
from typing import Optional

import torch

from .measure import held_for_backward, peak_memory_gib, profile_pass, record_profiles, time_steps
from .peers import build_peer

__all__ = ['case_env', 'backbone_case', 'train_iteration_case', 'classification_step_case',
           'TRAIN_ITER_CONFIGS', 'TRAIN_ITER_SIZES', 'SWIN_T_CONSTRUCTED', 'train_iter_config',
           'our_config', 'default_threads', 'REPO']

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
    from cvt_mm.apis.builders import load_config
    base, delta = SWIN_T_CONSTRUCTED[head]
    cfg = load_config(base)
    cfg.merge_from_dict(copy.deepcopy(delta))
    return cfg


# ------------------------------------------------------------------------- measuring


def our_config(path: str) -> str:
    """The file of one of our configs (``configs/...``) in the checkout these benchmarks are
    part of; a toolbox's ``package::path`` config is returned as it is.

    Raises:
        FileNotFoundError: naming the checkout.

    Example::

        >>> our_config('configs/mask_rcnn_cvt13_coco.py')
        '/path/to/checkout/configs/mask_rcnn_cvt13_coco.py'
    """
    if '::' in path:
        return path
    candidate = osp.join(REPO, path)
    if not osp.isfile(candidate):
        raise FileNotFoundError(f'{path} is not in the checkout {REPO}')
    return candidate


def case_env(thp: bool) -> dict:
    """The environment of a case: as tools/train.py runs (PyTorch's default: no huge pages
    for CPU tensors), or with ``THP_MEM_ALLOC_ENABLE=1`` when ``thp``."""
    env = dict(os.environ)
    env.pop('THP_MEM_ALLOC_ENABLE', None)
    if thp:
        env['THP_MEM_ALLOC_ENABLE'] = '1'
    return env


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


# ------------------------------------------------------------------------- cases
def backbone_case(model_cfg: dict, size, batch: int, mode: str, path: str, compiled: bool,
                  warmup: int, runs: int, threads: int, profile: int = 0) -> dict:
    """One backbone case (run inside its own process): see the module doc."""
    from mmengine.registry import MODELS  # where cvt_mm (imported below) registers CvT, CMT

    from cvt_mm.apis.flops import count_flops

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
        record_profiles(result, passes)
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

    from cvt_mm.apis.builders import build_model_from_config, load_config, synthetic_batch, task_of
    from cvt_mm.apis.flops import count_flops

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
        record_profiles(result, dict(
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

    from cvt_mm.apis.builders import build_model_from_config, load_config, synthetic_batch

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
