"""The whole model of any config, and batches for it, without data on disk: what the tools
that measure or export a model (FLOPs, benchmarks, ONNX export, ``make gpu-check``) build.

:func:`build_model_from_config` builds the real MMDetection / MMSegmentation / MMPretrain
model of a config (backbone from random weights, so no checkpoint file is needed);
:func:`synthetic_batch` makes a batch in the form its ``data_preprocessor`` takes from a
dataloader (uint8 images and data samples with ground truth).

Example (from the checkout's root; a detection or segmentation config works the same)::

    >>> import cvt_mm
    >>> from cvt_mm.apis.builders import build_model_from_config, synthetic_batch
    >>> model = build_model_from_config('configs/imagenet_cmt_ti_800e_in1k.py')
    >>> batch = synthetic_batch(model, batch_size=2, height=64, width=64)
    >>> losses = model.loss(**model.data_preprocessor(batch, training=True))
    >>> sorted(losses)
    ['loss']
"""
from __future__ import annotations

import copy
from typing import Optional, Union

import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import DefaultScope, init_default_scope

__all__ = ['TASKS', 'load_config', 'task_of', 'model_config', 'build_model_from_config',
           'synthetic_batch']

TASKS = ('mmdet', 'mmseg', 'mmpretrain')


def load_config(config: Union[str, Config]) -> Config:
    """A config, loaded.

    Args:
        config (str | Config): a config file (ours, or a user's inheriting ours), a toolbox's
            ``package::path`` config (``'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'``), or
            a loaded Config, returned as it is.

    Returns:
        Config: the config.
    """
    if isinstance(config, Config):
        return config
    if '::' in config:
        from mmengine.hub import get_config
        return get_config(config)
    return Config.fromfile(config)


def task_of(cfg: Config) -> str:
    """Which toolbox a config belongs to: its ``default_scope``.

    Args:
        cfg (Config): a loaded config.

    Returns:
        str: ``'mmdet'``, ``'mmseg'`` or ``'mmpretrain'``.

    Raises:
        ValueError: another ``default_scope``, naming the allowed ones.

    Example::

        >>> task_of(load_config('configs/upernet_cvt13_ade20k.py'))
        'mmseg'
    """
    scope = cfg.get('default_scope')
    if scope not in TASKS:
        raise ValueError(f'default_scope={scope!r} is not supported; allowed: '
                         f'{", ".join(map(repr, TASKS))}')
    return scope


def model_config(config: Union[str, Config], random_init: bool = True) -> ConfigDict:
    """The model dict :func:`build_model_from_config` builds from ``config``: ``model``, with
    a top-level ``data_preprocessor`` merged in as the Runner merges it; a copy, so ``config``
    is left as it was. Two configs of one ``default_scope`` whose ``model_config`` are equal
    build the same model.

    Args:
        config (str | Config): config file, ``mmdet::...`` path or a loaded Config.
        random_init (bool): drop the backbone's ``init_cfg`` (and MMSegmentation's
            ``pretrained``), so no checkpoint file is read. Defaults to True.

    Returns:
        ConfigDict: the model dict, a copy.

    Example::

        >>> model_config('configs/mask_rcnn_cvt13_coco.py').backbone.type
        'CvT'
    """
    cfg = load_config(config)
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor') is not None:  # what the Runner does with it
        model_cfg.setdefault('data_preprocessor', copy.deepcopy(cfg.data_preprocessor))
    if random_init:
        model_cfg.backbone.init_cfg = None
        if 'pretrained' in model_cfg:
            model_cfg.pretrained = None
    return model_cfg


def build_model_from_config(config: Union[str, Config], device: str = 'cpu',
                            random_init: bool = True) -> torch.nn.Module:
    """The config's whole model (detector, segmentor or classifier), built in its toolbox's
    registry scope, weights initialised, in train mode.

    Args:
        config (str | Config): config file, ``mmdet::...`` path or a loaded Config.
        device (str): where to put the model. Defaults to ``'cpu'``.
        random_init (bool): drop the backbone's ``init_cfg`` (and MMSegmentation's
            ``pretrained``), so no checkpoint file is read. Defaults to True.

    Returns:
        torch.nn.Module: the model, as ``tools/train.py`` would build it.

    Raises:
        ValueError: the config's ``default_scope`` is no toolbox's (:func:`task_of`).

    Example: the module's.
    """
    cfg = load_config(config)
    scope = task_of(cfg)
    model_cfg = model_config(cfg, random_init)
    init_default_scope(scope)
    from mmengine.registry import MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(model_cfg)
    model.init_weights()
    return model.to(device).train()


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _image(gen: torch.Generator, height: int, width: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, height, width), dtype=torch.uint8, generator=gen)


def _det_sample(gen, height: int, width: int, num_classes: int, num_objects: int):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData

    # Boxes of a quarter to a half of the image side, so every level of a pyramid sees some.
    sizes = torch.rand(num_objects, 2, generator=gen) * 0.25 + 0.25
    corners = torch.rand(num_objects, 2, generator=gen) * (1 - sizes)
    scale = torch.tensor([width, height], dtype=torch.float32)
    x0y0 = (corners * scale).floor()
    x1y1 = ((corners + sizes) * scale).ceil().minimum(scale)
    boxes = torch.cat([x0y0, x1y1], dim=1)
    masks = torch.zeros(num_objects, height, width, dtype=torch.uint8)
    for i, (x0, y0, x1, y1) in enumerate(boxes.int().tolist()):
        masks[i, y0:y1, x0:x1] = 1
    sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         scale_factor=(1., 1.)))
    sample.gt_instances = InstanceData(
        bboxes=boxes, labels=torch.randint(0, num_classes, (num_objects, ), generator=gen),
        masks=BitmapMasks(masks.numpy(), height, width))
    return sample


def _seg_sample(gen, height: int, width: int, num_classes: int):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    sample = SegDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width)))
    # Blocks of 8x8 pixels per class, so the labels have spatial structure.
    coarse = torch.randint(0, num_classes, (1, 1, -(-height // 8), -(-width // 8)),
                           generator=gen)
    labels = torch.nn.functional.interpolate(coarse.float(), scale_factor=8, mode='nearest')
    sample.gt_sem_seg = PixelData(data=labels[0, :, :height, :width].long())
    return sample


def _cls_sample(gen, num_classes: int):
    from mmpretrain.structures import DataSample
    return DataSample().set_gt_label(int(torch.randint(0, num_classes, (1, ), generator=gen)))


def _num_classes(model, task: str) -> int:
    if task == 'mmdet':
        roi_head = getattr(model, 'roi_head', None)
        if roi_head is not None:
            head = roi_head.bbox_head
            if isinstance(head, torch.nn.ModuleList):  # Cascade R-CNN: one head per stage
                head = head[-1]
        else:  # one-stage detectors and DETRs; Mask2Former's head is its panoptic_head
            head = getattr(model, 'bbox_head', None) or model.panoptic_head
        return head.num_classes
    if task == 'mmseg':
        return model.decode_head.num_classes
    num_classes = getattr(model.head, 'num_classes', None)
    return num_classes or model.backbone.num_classes


def synthetic_batch(model, batch_size: int, height: int, width: int, seed: int = 0,
                    num_objects: int = 3, task: Optional[str] = None) -> dict:
    """A batch as a dataloader gives it: ``dict(inputs=[uint8 CHW], data_samples=[...])``.

    Detection samples carry ``num_objects`` boxes with rectangular masks, segmentation samples
    a label map of 8x8 blocks, classification samples one label; labels are drawn from the
    model's own number of classes.

    Args:
        model: a model built by :func:`build_model_from_config`.
        batch_size (int): images in the batch.
        height (int): image height.
        width (int): image width.
        seed (int): images and labels depend on it alone. Defaults to 0.
        num_objects (int): boxes per detection image. Defaults to 3.
        task (str, optional): ``'mmdet'``, ``'mmseg'`` or ``'mmpretrain'``; by default taken
            from the model's class (its toolbox).

    Returns:
        dict: ``inputs`` (a list of uint8 CHW tensors) and ``data_samples`` (the toolbox's
        data samples with ground truth), for ``model.data_preprocessor``.

    Raises:
        ValueError: the task cannot be told from the model and ``task`` is not given.

    Example: the module's.
    """
    task = task or type(model).__module__.split('.')[0]
    if task not in TASKS:
        raise ValueError(f'cannot tell the task of {type(model).__name__}; pass task= one of '
                         f'{", ".join(map(repr, TASKS))}')
    gen = _generator(seed)
    num_classes = _num_classes(model, task)
    inputs, samples = [], []
    for _ in range(batch_size):
        inputs.append(_image(gen, height, width))
        if task == 'mmdet':
            samples.append(_det_sample(gen, height, width, num_classes, num_objects))
        elif task == 'mmseg':
            samples.append(_seg_sample(gen, height, width, num_classes))
        else:
            samples.append(_cls_sample(gen, num_classes))
    return dict(inputs=inputs, data_samples=samples)
