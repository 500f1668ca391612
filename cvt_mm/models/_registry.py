"""Registering a model family where its users look for it, each only where installed: the
OpenMMLab backbone in MMEngine's root ``MODELS`` (which MMDetection's, MMSegmentation's and
MMPretrain's registries fall back to), the timm entry points with their pretrained metadata in
timm's registry. (The Hugging Face classes register in :mod:`.huggingface`.)

Also the pieces of a timm entry point: :func:`timm_pretrained_cfg` (one row of the published
checkpoints as timm's metadata), :func:`build_timm_model` and :func:`timm_checkpoint_filter`.
"""
from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Callable, Dict, Iterable, Optional, Sequence

import torch

from .._imports import installed
from ..checkpoint.loading import arch_of, convert_for, fit_state_dict
from ..checkpoint.published import published_by_name

__all__ = ['register_mmengine', 'register_timm', 'timm_pretrained_cfg',
           'build_timm_model', 'timm_checkpoint_filter']

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def register_mmengine(cls: type) -> None:
    """``cls`` in MMEngine's root ``MODELS`` under its class name, where MMEngine is
    installed (``type='CvT'`` then builds in every toolbox's scope)."""
    if not installed('mmengine'):
        return
    from mmengine.registry import MODELS
    registered = MODELS.module_dict.get(cls.__name__)
    if registered is cls:
        return
    # The same class from a reload of its module replaces itself; another package's class of
    # the name is MMEngine's error to raise.
    ours = registered is not None and (registered.__module__, registered.__qualname__) == (
        cls.__module__, cls.__qualname__)
    MODELS.register_module(module=cls, force=ours)


def timm_pretrained_cfg(checkpoint: str, first_conv: str, crop_pct: float = 0.875,
                        pool_stride: Optional[int] = None, **overrides) -> dict:
    """timm's pretrained metadata of the published checkpoint called ``checkpoint`` (a name of
    :data:`cvt_mm.checkpoint.PUBLISHED`): its URL, resolution, licence and the official
    evaluation's preprocessing (bicubic, ImageNet mean and std, ``crop_pct``). A file on the
    Hugging Face Hub is named by its repository (``hf_hub_id``), which timm then downloads
    through the Hub's cache: the URLs of every ``microsoft/cvt-*`` file end in the same file
    name, under which a download cache keyed by names would mix them up. ``pool_size`` is
    the (h, w) of ``forward_features``' map at the checkpoint's resolution, ``ceil(size /
    pool_stride)``; None (as timm's ViTs) for a model whose features are tokens."""
    entry = published_by_name(checkpoint)
    size = entry.input_size
    hub = re.match(r'https://huggingface\.co/([^/]+/[^/]+)/resolve/', entry.url)
    if hub:
        overrides.setdefault('hf_hub_id', hub.group(1))
    pool_size = None if pool_stride is None else (-(-size // pool_stride), ) * 2
    return dict(url=entry.url, num_classes=1000, input_size=(3, size, size), pool_size=pool_size,
                crop_pct=crop_pct, interpolation='bicubic', mean=IMAGENET_MEAN, std=IMAGENET_STD,
                first_conv=first_conv, classifier='head', fixed_input_size=False,
                license=entry.licence.lower(), **overrides)


def build_timm_model(model_cls: type, variant: str, pretrained: bool, default_arch,
                     num_stages: int, **kwargs) -> torch.nn.Module:
    """A timm entry point's model: ``model_cls(arch=default_arch, **kwargs)`` built by timm's
    ``build_model_with_cfg`` (pretrained weights through ``model_cls.checkpoint_filter``,
    ``features_only`` through ``forward_intermediates``, every stage by default). An ``arch``
    among ``kwargs`` (a custom arch a ``local-dir:`` folder's ``model_args`` hold) replaces the
    entry point's.

    timm's ``set_scriptable`` and ``set_exportable`` change nothing here: a scripted model takes
    the reference formulas by itself (:mod:`.fast`, "Beyond eager"), and torch.export takes the
    fast paths, whose bias resize keeps sizes symbolic where the reference resize would fix
    them."""
    from timm.models import build_model_with_cfg
    arch = kwargs.pop('arch', default_arch)
    cfg = kwargs.get('pretrained_cfg')
    if pretrained and isinstance(cfg, dict) and cfg.get('source') == 'local-dir':
        _check_weights_in(cfg.get('file') or '')
    out_indices = kwargs.pop('out_indices', tuple(range(num_stages)))
    return build_model_with_cfg(
        model_cls, variant, pretrained, arch=arch,
        pretrained_filter_fn=model_cls.checkpoint_filter,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'), **kwargs)


WEIGHT_FILE_TYPES = ('.safetensors', '.pth', '.pth.tar', '.bin')


def _check_weights_in(folder: str) -> None:
    """A ``local-dir:`` folder must hold weights; timm would only say none is 'suitable'."""
    found = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if not any(name.endswith(WEIGHT_FILE_TYPES) for name in found):
        raise FileNotFoundError(
            f'{folder} holds no weights: model.safetensors is missing (what '
            'tools/misc/export_pretrained.py writes beside config.json; timm also takes '
            f'pytorch_model.bin or any {"/".join(WEIGHT_FILE_TYPES)} file). In the folder: '
            f'{", ".join(found) or "nothing"}')


def timm_checkpoint_filter(state_dict: dict, model: torch.nn.Module) -> dict:
    """timm's ``pretrained_filter_fn``: what timm read (any layout of the model's family, in any
    container) renamed into ours and checked against the model as our own loader checks it:
    another family or another size is an error naming both. The first convolution may differ in
    input channels (timm adapts it to ``in_chans`` next)."""
    cfg = getattr(model, 'pretrained_cfg', None) or {}
    source = cfg.get('file') or cfg.get('url') or cfg.get('hf_hub_id') or 'the weights'
    family = model.family
    sd, layout = convert_for(model, state_dict, family, source)
    first_conv = cfg.get('first_conv')
    return fit_state_dict(model, sd, family, source, layout,
                          reshapable=(f'{first_conv}.weight', ) if first_conv else (),
                          partial_hint=f" (timm.create_model('{cfg.get('architecture')}') is "
                          f'{arch_of(model.state_dict(), model.arch_zoo, family)})')


_warned: set = set()


def register_timm(module_name: str, entrypoints: Iterable[Callable],
                  pretrained_cfgs: Dict[str, dict], notrace_functions: Iterable[Callable] = (),
                  notrace_modules: Iterable[type] = ()) -> Sequence[str]:
    """Register ``entrypoints`` (functions named as the models) with timm, with
    ``pretrained_cfgs`` (``{'name.tag': cfg}``, the first tag of a name its default), where timm
    is installed; returns the names registered.

    A name timm already has from elsewhere (a later timm shipping it) is left to timm: ours is
    not registered under it, and a warning says so once per process.

    ``notrace_functions`` and ``notrace_modules`` join timm's leaves of torch.fx tracing
    (``timm.layers.register_notrace_function`` / ``register_notrace_module``, which timm's
    ``features_only=True, feature_cls='fx'`` and torchvision's ``create_feature_extractor``
    with ``get_notrace_functions()`` / ``get_notrace_modules()`` use): code that reads sizes as
    Python ints or runs an autograd Function, which fx cannot trace through, runs as one call.
    Registered here, where timm is installed, because the models import nothing from timm.
    """
    if not installed('timm'):
        return []
    from timm.layers import register_notrace_function, register_notrace_module
    from timm.models import generate_default_cfgs, is_model, model_entrypoint, register_model
    for fn in notrace_functions:
        register_notrace_function(fn)
    for cls in notrace_modules:
        register_notrace_module(cls)
    module = sys.modules[module_name]
    # timm's register_model takes a model's pretrained cfgs from its entry point's module.
    module.default_cfgs = generate_default_cfgs(pretrained_cfgs)
    registered = []
    for fn in entrypoints:
        name = fn.__name__
        if is_model(name):
            theirs = model_entrypoint(name)
            if getattr(theirs, '__module__', None) == fn.__module__:
                registered.append(name)  # ours, from an earlier import of this module
                continue
            if name not in _warned:
                _warned.add(name)
                import timm
                warnings.warn(
                    f"timm {timm.__version__} already provides a model named '{name}' (from "
                    f'{getattr(theirs, "__module__", "?")}); timm\'s is kept and cvt_mm\'s is not '
                    f"registered under that name. cvt_mm's is {fn.__module__}.{name}().",
                    stacklevel=2)
            continue
        register_model(fn)
        registered.append(name)
    return registered
