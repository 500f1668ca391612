"""What a config trains with, read from what the runner builds: the optimizer's parameter groups
from MMEngine's ``build_optim_wrapper`` (so a custom key that overrides ``norm_decay_mult`` shows),
the parameter schedulers and loop as MMEngine builds them, and the images a run sees.

:func:`describe_recipe` returns one row of short strings per config (:data:`COLUMNS`); docs/
recipes.md is the table of every config's row beside its source, and
``python tools/analysis_tools/recipe.py --check docs/recipes.md`` (a test runs it) fails when a
config and its row disagree. The model is built on the ``meta`` device: no weights are allocated
and no checkpoint is read.

Example::

    >>> from cvt_mm.apis.recipe import describe_recipe
    >>> row = describe_recipe('configs/mask_rcnn_cvt13_coco.py')
    >>> row['batch'], row['no weight decay']
    ('16 (8×2)', 'norms, cls token')
"""
from __future__ import annotations

import logging
from typing import Dict, List, Union

import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope, init_default_scope
from torch import nn

from ..engine.norm_decay import NORMS  # the norms MMEngine's norm_decay_mult applies to
from .builders import load_config, model_config, task_of

__all__ = ['COLUMNS', 'DATASET_IMAGES', 'describe_recipe', 'build_parameter_groups',
           'parameter_groups']

#: Training images of the datasets our configs train on: COCO train2017, ADE20K's training
#: split, ImageNet-1k's training set.
DATASET_IMAGES = {'CocoDataset': 118_287, 'ADE20KDataset': 20_210, 'ImageNet': 1_281_167}
#: The cells :func:`describe_recipe` fills, in the table's order.
COLUMNS = ('batch', 'optimizer', 'backbone LR', 'no weight decay', 'schedule', 'images seen',
           'drop path', 'EMA', 'BatchNorm', 'augmentation')
#: The kinds of parameter the ``no weight decay`` cell reports, in its order.
KINDS = ('norms', 'biases', 'cls token', 'rel-pos', 'embeddings')
_WRAPPERS = ('RepeatDataset', 'ClassBalancedDataset', 'MultiImageMixDataset')


def _kind(module: nn.Module, name: str) -> str:
    if isinstance(module, NORMS):
        return 'norms'
    if name == 'cls_token':
        return 'cls token'
    if name == 'relative_pos':
        return 'rel-pos'
    if isinstance(module, nn.Embedding) or name.endswith('embed'):
        return 'embeddings'
    return 'biases' if name == 'bias' else 'weights'


def parameter_groups(model: nn.Module, optimizer: torch.optim.Optimizer) -> List[dict]:
    """One dict per trainable parameter of ``model``: ``name``, ``kind`` (one of
    :data:`KINDS` or ``'weights'``), ``backbone`` (bool), and the ``lr`` and ``weight_decay``
    its group in ``optimizer`` gives it."""
    group_of = {id(p): g for g in optimizer.param_groups for p in g['params']}
    out = []
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            group = group_of[id(param)]
            full = f'{module_name}.{name}' if module_name else name
            out.append(dict(name=full, kind=_kind(module, name),
                            backbone=full.startswith('backbone.'), lr=group['lr'],
                            weight_decay=group.get('weight_decay', 0.0)))
    return out


def _no_decay(params: List[dict]) -> str:
    parts = []
    for kind in KINDS:
        of_kind = [p for p in params if p['kind'] == kind]
        zero = [p for p in of_kind if p['weight_decay'] == 0]
        if not zero:
            continue
        if len(zero) == len(of_kind):
            parts.append(kind)
            continue
        backbone = [p for p in of_kind if p['backbone']]
        if all(p['backbone'] for p in zero) and len(zero) == len(backbone):
            parts.append(f'backbone {kind}')
        elif not any(p['backbone'] for p in zero) and len(zero) == len(of_kind) - len(backbone):
            parts.append(f'{kind} outside the backbone')
        else:
            parts.append(f'{kind} ({len(zero)} of {len(of_kind)})')
    return ', '.join(parts) or 'none'


def _backbone_lr(params: List[dict], base_lr: float, paramwise: dict) -> str:
    mults = sorted({round(p['lr'] / base_lr, 6) for p in params if p['backbone']})
    if paramwise.get('layer_decay_rate') is not None:
        return (f"×{paramwise['layer_decay_rate']:g} a layer "
                f"(×{mults[0]:.3g} to ×{mults[-1]:.3g})")
    return ', '.join(f'×{m:g}' for m in mults)


def _images(cfg: Config) -> int:
    dataset = cfg.train_dataloader.dataset
    times = 1
    while dataset.get('type') in _WRAPPERS:
        times *= dataset.get('times', 1)
        dataset = dataset.dataset
    if dataset.type not in DATASET_IMAGES:
        raise ValueError(f'{dataset.type}: no image count known for it; known: '
                         f'{", ".join(DATASET_IMAGES)}')
    return DATASET_IMAGES[dataset.type] * times


def _length(cfg: Config):
    """(length, unit 'ep' or 'it') of the training loop."""
    loop = cfg.train_cfg
    if loop.get('max_epochs') is not None:
        return loop.max_epochs, 'ep'
    if loop.get('max_iters') is not None:
        return loop.max_iters, 'it'
    raise ValueError(f'train_cfg {dict(loop)} sets neither max_epochs nor max_iters')


def _amount(value: float, unit: str) -> str:
    return f'{value / 1000:g}k {unit}' if unit == 'it' and value >= 1000 else f'{value:g} {unit}'


def _schedule(cfg: Config) -> str:
    length, unit = _length(cfg)
    parts, covered = [], 0
    schedulers = cfg.param_scheduler
    for sched in [schedulers] if isinstance(schedulers, dict) else schedulers:
        sunit = 'ep' if sched.get('by_epoch', True) else 'it'
        begin, end = sched.get('begin', 0), sched.get('end', length)
        span = f'{_amount(begin, sunit)}-{_amount(end, sunit)}' if begin else \
            _amount(end, sunit)
        kind = sched.type
        if kind == 'LinearLR':
            parts.append(f'linear warm-up {span}')
        elif kind == 'MultiStepLR':
            steps = ', '.join(f'{m:g}' for m in sched.milestones)
            parts.append(f"×{sched.get('gamma', 0.1):g} at {steps} {sunit}")
        elif kind == 'CosineAnnealingLR':
            parts.append(f"cosine to {sched.get('eta_min', 0.0):g} over {span}")
        elif kind == 'PolyLR':
            parts.append(f"poly {sched.get('power', 1.0):g} to {sched.get('eta_min', 0.0):g}"
                         f' over {span}')
        else:
            parts.append(f'{kind} {span}')
        if sunit == unit:
            covered = max(covered, min(end, length))
    if covered < length:
        parts.append(f'then flat to {_amount(length, unit)}')
    return f'{_amount(length, unit)}: ' + '; '.join(parts)


def _drop_path(backbone: nn.Module) -> float:
    # The built blocks' rates (the last block has the model's), not the config's key: the
    # backbone's default applies where a config sets none.
    return max([getattr(m, 'drop_prob', 0.0) for m in backbone.modules()], default=0.0)


def _seen(cfg: Config, batch: int) -> str:
    length, unit = _length(cfg)
    images = _images(cfg)
    if unit == 'ep':
        return f'{length * images / 1e6:.4g}M'
    return f'{length * batch / 1e6:.4g}M = {length * batch / images:.1f} ep'


def _batchnorm(cfg: Config) -> str:
    backbone = cfg.model.backbone
    parts = ['frozen statistics' if backbone.get('norm_eval') else
             ('SyncBN' if cfg.get('sync_bn') else 'per GPU')]
    if backbone.get('frozen_stages', -1) >= 0:
        parts.append(f'stages ≤ {backbone.frozen_stages} frozen')
    return ', '.join(parts)


def _transforms(node):
    """Every transform dict of a pipeline, those inside ``RandomChoice``/``RandomApply`` too."""
    if isinstance(node, dict):
        yield node
        node = node.get('transforms', [])
    if isinstance(node, (list, tuple)):
        for item in node:
            yield from _transforms(item)


def _augmentation(cfg: Config) -> str:
    parts = []
    for t in _transforms(cfg.train_dataloader.dataset.get('pipeline', [])):
        kind = t.get('type')
        if kind == 'RandomResize' and t.get('ratio_range'):
            parts.append('resize ×{:g}-{:g}'.format(*t.ratio_range))
        elif kind == 'RandomChoiceResize' and 'multi-scale' not in parts:
            parts.append('multi-scale')
        elif kind == 'RandomCrop':
            parts.append('crop {}×{}'.format(*t.crop_size))
        elif kind == 'RandomResizedCrop':
            parts.append(f'random-resized crop {t.scale}')
        elif kind == 'RandomFlip':
            parts.append('flip')
        elif kind == 'PhotoMetricDistortion':
            parts.append('photometric')
        elif kind == 'RandAugment':
            parts.append(f"RandAugment m{t.magnitude_level}")
        elif kind == 'RandomErasing':
            parts.append(f'erasing {t.erase_prob:g}')
    for aug in (cfg.model.get('train_cfg') or {}).get('augments', []):
        parts.append(f"{aug['type']} {aug['alpha']:g}")
    loss = (cfg.model.get('head') or {}).get('loss', {})
    if loss.get('label_smooth_val'):
        parts.append(f'label smoothing {loss.label_smooth_val:g}')
    if cfg.train_dataloader.get('sampler', {}).get('type') == 'RepeatAugSampler':
        parts.append(f"repeated ×{cfg.train_dataloader.sampler.get('num_repeats', 3)}")
    return ', '.join(dict.fromkeys(parts)) or 'none'


def build_parameter_groups(config: Union[str, Config]):
    """``(model, parameter_groups(model, optimizer), optimizer)`` of ``config``: its model built on
    the meta device in its toolbox's scope, its optimizer by MMEngine's
    ``build_optim_wrapper``, as the runner builds them."""
    from mmengine.optim import build_optim_wrapper

    cfg = load_config(config)
    scope = task_of(cfg)
    init_default_scope(scope)
    from mmengine.registry import MODELS
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # the constructor logs every parameter's options
    try:
        with DefaultScope.overwrite_default_scope(scope), torch.device('meta'):
            model = MODELS.build(model_config(cfg))
            optimizer = build_optim_wrapper(model, cfg.optim_wrapper).optimizer
    finally:
        logger.setLevel(level)
    return model, parameter_groups(model, optimizer), optimizer


def describe_recipe(config: Union[str, Config]) -> Dict[str, str]:
    """The row of ``config`` for :data:`COLUMNS`, from the optimizer MMEngine builds for its
    model and from its loop, schedulers, data and hooks.

    Args:
        config (str | Config): a config file or a loaded Config.

    Returns:
        dict[str, str]: one string a column. ``batch`` counts GPUs as
        ``auto_scale_lr.base_batch_size`` over the per-GPU batch (the configs state the
        total batch their LR is for there); ``images seen`` is the loop's length times the
        total batch (iterations) or times the dataset (epochs).
    """
    cfg = load_config(config)
    per_gpu = cfg.train_dataloader.batch_size
    total = cfg.get('auto_scale_lr', {}).get('base_batch_size')
    if not total or total % per_gpu:
        raise ValueError(f'auto_scale_lr.base_batch_size={total!r} must be a multiple of the '
                         f'per-GPU batch {per_gpu}: it states the total batch of the recipe')
    model, params, optimizer = build_parameter_groups(cfg)
    base_lr, base_wd = optimizer.defaults['lr'], optimizer.defaults.get('weight_decay', 0)
    paramwise = cfg.optim_wrapper.get('paramwise_cfg') or {}
    clip = cfg.optim_wrapper.get('clip_grad') or {}
    ema = [h for h in cfg.get('custom_hooks', []) if h.get('type') == 'EMAHook']
    return {
        'batch': f'{total} ({total // per_gpu}×{per_gpu})',
        'optimizer': f'{type(optimizer).__name__} lr {base_lr:g} wd {base_wd:g}'
                     + (f", clip {clip['max_norm']:g}" if clip.get('max_norm') else ''),
        'backbone LR': _backbone_lr(params, base_lr, paramwise),
        'no weight decay': _no_decay(params),
        'schedule': _schedule(cfg),
        'images seen': _seen(cfg, total),
        'drop path': f'{_drop_path(model.backbone):g}',
        'EMA': f"{ema[0].get('momentum', 2e-4):g}" if ema else 'none',
        'BatchNorm': _batchnorm(cfg),
        'augmentation': _augmentation(cfg),
    }


# ----------------------------------------------------------------------------- the table
