"""What an exported file stores about its model, so that a program without torch can feed
it and read it (``tools/deployment/onnx_inference.py``): ONNX ``metadata_props`` entries,
strings, JSON where structured.

=======================  ===========================================================
key                      value
=======================  ===========================================================
``cvt_mm.format``        ``1``: the version of this layout
``cvt_mm.task``          ``instance-segmentation``, ``detection``,
                         ``semantic-segmentation``, ``classification``, or ``features``
                         for a part (backbone, neck, RPN)
``cvt_mm.preprocess``    ``{"mean": [...], "std": [...], "bgr_to_rgb": bool,
                         "pad_size_divisor": int, "pad_value": float}``: the config's
                         ``data_preprocessor``
``cvt_mm.pipeline``      ``[{"type": "Resize", "scale": [w, h], "keep_ratio": bool}, ...]``:
                         the resizing and cropping steps of the config's test pipeline
``cvt_mm.classes``       ``["person", ...]``: the dataset's class names
``cvt_mm.palette``       ``[[r, g, b], ...]`` when the dataset has one
``cvt_mm.score_thr``     the test config's score threshold (detectors)
``cvt_mm.config``,       the config's file name, the part, the checkpoint's file name
``cvt_mm.part``,
``cvt_mm.weights``
=======================  ===========================================================
"""
from __future__ import annotations

import json
from typing import List, Optional

from torch import nn

FORMAT = '1'
# Test-pipeline steps that change the image's size, and the arguments the runtime needs.
SIZE_STEPS = {'Resize': ('scale', 'scale_factor', 'keep_ratio'),
              'ResizeEdge': ('scale', 'edge'),
              'CenterCrop': ('crop_size', )}


def preprocess_info(model: nn.Module) -> dict:
    """What the config's ``data_preprocessor`` does before the graph: mean, std (RGB/BGR
    order of the converted image), channel conversion, the padding divisor and value."""
    pre = getattr(model, 'data_preprocessor', None)
    info = {}
    if pre is None:
        return info
    if getattr(pre, '_enable_normalize', False):
        info['mean'] = [round(float(v), 4) for v in pre.mean.flatten()]
        info['std'] = [round(float(v), 4) for v in pre.std.flatten()]
    # The flag that swaps the channels of the loaded (BGR) image before normalising:
    # MMEngine's (MMDetection's), MMSegmentation's and MMPretrain's names for it.
    flags = ('_channel_conversion', 'channel_conversion', 'to_rgb')
    info['bgr_to_rgb'] = any(bool(getattr(pre, f, False)) for f in flags)
    divisor = getattr(pre, 'pad_size_divisor', None) or getattr(pre, 'size_divisor', None)
    if divisor and int(divisor) > 1:
        info['pad_size_divisor'] = int(divisor)
        info['pad_value'] = float(getattr(pre, 'pad_value', getattr(pre, 'pad_val', 0)))
    return info


def _plain(value):
    """Config values (tuples, ConfigDicts) as JSON's types."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def pipeline_size_steps(cfg) -> List[dict]:
    """The steps of the config's test pipeline that change the image's size (``Resize``,
    ``ResizeEdge``, ``CenterCrop``), with the arguments that say how."""
    loader = cfg.get('test_dataloader') or {}
    dataset = loader.get('dataset') or {}
    pipeline = dataset.get('pipeline') or cfg.get('test_pipeline') or []
    steps = []
    for step in pipeline:
        kind = step.get('type') if isinstance(step.get('type'), str) else None
        if kind in SIZE_STEPS:
            steps.append(dict(type=kind, **{k: _plain(step[k]) for k in SIZE_STEPS[kind]
                                            if k in step}))
    return steps


def dataset_metainfo(cfg) -> dict:
    """``classes`` (and ``palette``) of the config's test dataset: its ``metainfo`` when it
    sets one, else its class's ``METAINFO``; empty when neither is known."""
    loader = cfg.get('test_dataloader') or {}
    dataset = loader.get('dataset') or {}
    while 'dataset' in dataset and 'metainfo' not in dataset:  # wrappers
        dataset = dataset['dataset']
    meta = dict(dataset.get('metainfo') or {})
    if 'classes' not in meta and isinstance(dataset.get('type'), str):
        from mmengine.registry import DATASETS
        scope = cfg.get('default_scope')
        cls = DATASETS.get(f'{scope}.{dataset["type"]}' if scope else dataset['type'])
        meta = {**dict(getattr(cls, 'METAINFO', None) or {}), **meta}
    out = {}
    if meta.get('classes'):
        out['classes'] = [str(c) for c in meta['classes']]
    if meta.get('palette'):
        out['palette'] = [[int(c) for c in color] for color in meta['palette']]
    return out


def model_classes(model: nn.Module) -> Optional[int]:
    """The number of classes the model's final head predicts, or None for a part without."""
    for path in ('roi_head.bbox_head', 'bbox_head', 'decode_head', 'head'):
        module = model
        for name in path.split('.'):
            module = getattr(module, name, None)
        if isinstance(module, nn.ModuleList):
            module = module[-1]
        if module is not None and hasattr(module, 'num_classes'):
            return int(module.num_classes)
    return None


def check_classes(config_name: str, classes: Optional[list], count: Optional[int]) -> None:
    """``ValueError`` naming the config when its dataset's class names and its head's
    ``num_classes`` differ (a config that changed one and not the other)."""
    if classes is not None and count is not None and len(classes) != count:
        raise ValueError(
            f'{config_name}: the test dataset has {len(classes)} classes '
            f'({", ".join(classes[:5])}{", ..." if len(classes) > 5 else ""}) but the '
            f'model\'s head predicts num_classes={count}; set both to the same number')


def file_metadata(cfg, model: nn.Module, task: str, config_name: str, part: str,
                  weights: str, score_thr: Optional[float] = None) -> dict:
    """The ``metadata_props`` of an exported file (the module's table); ``ValueError`` from
    :func:`check_classes`."""
    meta = dataset_metainfo(cfg)
    if task != 'features':
        check_classes(config_name, meta.get('classes'), model_classes(model))
    props = {'cvt_mm.format': FORMAT, 'cvt_mm.task': task, 'cvt_mm.config': config_name,
             'cvt_mm.part': part, 'cvt_mm.weights': weights,
             'cvt_mm.preprocess': json.dumps(preprocess_info(model)),
             'cvt_mm.pipeline': json.dumps(pipeline_size_steps(cfg))}
    for key in ('classes', 'palette'):
        if key in meta:
            props[f'cvt_mm.{key}'] = json.dumps(meta[key])
    if score_thr is not None:
        props['cvt_mm.score_thr'] = repr(float(score_thr))
    return props
