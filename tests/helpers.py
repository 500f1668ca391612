"""What the tests share: the checkout's paths, the repository's tools run as a user runs
them, tiny datasets in the real layouts, user configs on them, and checkpoints of random
models. (The models and synthetic batches come from :mod:`cvt_mm.apis.builders`, re-exported
here.)

Example::

    from helpers import ROOT, det_user_config, make_tiny_data, run_tool
"""
from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import os
import os.path as osp
import re
import socket
import subprocess
import sys
import tempfile
from typing import Optional, Union

import torch
from mmengine.config import Config
from mmengine.logging import MessageHub
from mmengine.registry import DefaultScope
from warm_tools import WarmTools

from cvt_mm.apis.builders import (  # noqa: F401  (re-exported for the tests)
    TASKS,
    build_model_from_config,
    load_config,
    model_config,
    synthetic_batch,
    task_of,
)

# The checkout, with its configs and tools.
ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _tested_stacks() -> dict:
    """tools/misc/stacks.py's table of the tested stacks (the repository's, not the
    package's), loaded by its path as tools/misc/check_stack.py loads it."""
    spec = importlib.util.spec_from_file_location(
        'cvt_mm_tested_stacks', osp.join(ROOT, 'tools', 'misc', 'stacks.py'))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple needs its module while the class is made
    spec.loader.exec_module(module)
    return module.STACKS


#: name -> Stack(venv, python, requirements, extras, imports) of each tested stack.
STACKS = _tested_stacks()
CONFIGS = osp.join(ROOT, 'configs')
TOOLS = osp.join(ROOT, 'tools')
# Side of the tiny detection datasets' images.
IMAGE_SIZE = 96


@functools.lru_cache(maxsize=None)
def _parsed_config(path: str, mtime_ns: int) -> Config:
    return Config.fromfile(path)


def repo_config(path: str) -> Config:
    """``Config.fromfile(path)``, parsed once per test process and handed out as a copy:
    MMEngine reads every metafile of a toolbox again for each ``mmdet::`` config it resolves
    (about 1 s a config), and several modules load the same configs."""
    path = osp.abspath(path)
    return copy.deepcopy(_parsed_config(path, os.stat(path).st_mtime_ns))


def write_checkpoint(config: Union[str, Config], path: str, seed: int = 0,
                     state_dict: Optional[dict] = None) -> str:
    """Write a checkpoint of the config's whole model as ``tools/train.py`` writes it for
    loading: ``state_dict``, ``meta.dataset_meta`` (the class names and palette the
    toolboxes' inferencers name predictions with), here those of the config's test dataset
    type (COCO's 80 classes, ADE20K's 150, ImageNet's 1000), and a ``message_hub`` holding a
    logged loss, as training's: its MMEngine ``HistoryBuffer`` and numpy arrays are what a
    plain ``torch.load(weights_only=True)`` (MMEngine's loader on torch >= 2.6) refuses.

    Args:
        config (str | Config): config file, ``mmdet::...`` path or a loaded Config.
        path (str): the ``.pth`` file to write (folders are made).
        seed (int): the random weights depend on it alone. Defaults to 0.
        state_dict (dict, optional): tensors that replace the random ones of the same names
            (e.g. a classifier bias that makes the model predict something). Defaults to None.

    Returns:
        str: ``path``.

    Example::

        >>> write_checkpoint('configs/upernet_cvt13_ade20k.py', 'work_dirs/x/iter_1.pth')
    """
    cfg = load_config(config)
    scope = task_of(cfg)
    torch.manual_seed(seed)
    model = build_model_from_config(cfg)
    weights = model.state_dict()
    for key, value in (state_dict or {}).items():
        if key not in weights or weights[key].shape != value.shape:
            raise KeyError(f'write_checkpoint: {key} {tuple(value.shape)} is not a tensor of '
                           f'the model of that shape')
        weights[key] = value
    # The toolbox's own registry: it imports its datasets when first asked.
    registry = importlib.import_module(f'{scope}.registry').DATASETS
    with DefaultScope.overwrite_default_scope(scope):
        dataset_type = registry.get(cfg.test_dataloader.dataset.type)
    meta = {k.lower(): v for k, v in dataset_type.METAINFO.items() if k.lower() != 'categories'}
    hub = MessageHub(f'write_checkpoint-{path}')
    hub.update_scalar('train/loss', 1.5)
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    torch.save(dict(meta=dict(dataset_meta=meta), state_dict=weights,
                    message_hub=hub.state_dict()), path)
    return path


# Classes of the shapes data that ``tools/misc/make_demo_data.py`` writes (COCO and ADE layouts).
SHAPES = ('circle', 'square', 'triangle')
SEG_CLASSES = ('background', ) + SHAPES
SEG_PALETTE = [[120, 120, 120], [220, 20, 60], [0, 130, 230], [250, 170, 30]]


def write_user_config(path: str, base: str, data_root: str, work_dir: str,
                      image_size: int = 96, max_epochs: int = 1, max_iters: int = 2,
                      **extra) -> str:
    """Write the config a user would write to train one of ours on their own data: inherit
    ``base`` (a file under ``configs/``, or an absolute path), point it at the shapes data of
    ``tools/misc/make_demo_data.py`` with its classes, train from random weights at
    ``image_size``, and keep the base's model, BatchNorm policy, optimizer and hooks.

    Detection bases (``mask_rcnn_*``, ``retinanet_*``, ``cascade_mask_rcnn_*``, ``dino_*``)
    read ``data_root`` as COCO layout and train ``max_epochs`` epochs; ``mask2former_*_coco``
    reads it as COCO layout and trains ``max_iters`` iterations (its base is iteration-based);
    segmentation bases (``upernet_*``, ``sem_fpn_*``, ``mask2former_*_ade20k``) read it as
    ADE20K layout and train ``max_iters`` iterations with ``image_size`` crops. DINO and
    Mask2Former are narrowed to test size (``_DET_HEADS``, ``_SEG_HEADS``). ``extra`` adds
    top-level entries (``name=value``) at the end.

    Args:
        path (str): the config file to write.
        base (str): the config it inherits.
        data_root (str): the ``coco/`` or ``ade/`` folder of the generated data.
        work_dir (str): where the run writes logs and checkpoints.
        image_size (int): training/testing image side (crop side for segmentation).
            Defaults to 96.
        max_epochs (int): detection epochs. Defaults to 1.
        max_iters (int): segmentation and Mask2Former COCO iterations. Defaults to 2.

    Returns:
        str: ``path``.
    """
    base_path = base if osp.isabs(base) else osp.join(CONFIGS, base)
    name = osp.basename(base_path)
    data_root = data_root.rstrip('/') + '/'
    if name.startswith(('upernet', 'sem_fpn')) or (name.startswith('mask2former')
                                                   and '_ade20k' in name):
        body = _SEG_USER_CONFIG.format(data_root=data_root, size=image_size,
                                       classes=SEG_CLASSES, palette=SEG_PALETTE,
                                       max_iters=max_iters,
                                       heads=_SEG_HEADS[name.split('_')[0]].format(
                                           size=image_size))
    elif name.startswith(tuple(_DET_HEADS)):
        heads = next(v for k, v in _DET_HEADS.items() if name.startswith(k))
        body = _DET_USER_CONFIG.format(data_root=data_root, size=image_size, classes=SHAPES,
                                       heads=heads.format(size=image_size),
                                       max_epochs=max_epochs)
        if name.startswith('mask2former'):  # iteration-based, as its base
            # (These replace the body's train_cfg and default_hooks: the logger's interval
            # is repeated, or the base's 50 logs only the first of a few iterations.)
            body += (f"train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', "
                     f"max_iters={max_iters}, val_interval={max_iters})\n"
                     f"default_hooks = dict(logger=dict(interval=1), checkpoint=dict("
                     f"by_epoch=False, interval={max_iters}))\n")
    elif name.startswith(('mask_rcnn', 'retinanet')):
        roi = ('roi_head=dict(bbox_head=dict(num_classes=len(classes)), '
               'mask_head=dict(num_classes=len(classes))),\n    '
               "train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100), "
               'rcnn=dict(sampler=dict(num=64))),\n    '
               "test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=50), "
               'rcnn=dict(max_per_img=10))') if name.startswith('mask_rcnn') else \
            'bbox_head=dict(num_classes=len(classes))'
        body = _DET_USER_CONFIG.format(data_root=data_root, size=image_size, classes=SHAPES,
                                       heads=roi, max_epochs=max_epochs)
    else:
        raise ValueError(f'write_user_config: cannot tell the task of {name}; allowed bases: '
                         "'mask_rcnn_*', 'retinanet_*', 'cascade_mask_rcnn_*', 'dino_*', "
                         "'mask2former_*', 'upernet_*', 'sem_fpn_*'")
    text = f'_base_ = {base_path!r}\n' + body + f'work_dir = {work_dir!r}\n'
    text += ''.join(f'{key} = {value!r}\n' for key, value in extra.items())
    with open(path, 'w') as f:
        f.write(text)
    return path


_DET_USER_CONFIG = '''
data_root = {data_root!r}
classes = {classes!r}
model = dict(
    backbone=dict(init_cfg=None),
    # A small image holds three objects: far fewer proposals and RoIs do.
    {heads})
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=({size}, {size}), keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=({size}, {size}), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(max_epochs={max_epochs}, val_interval={max_epochs})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={max_epochs}))
'''

_SEG_USER_CONFIG = '''
data_root = {data_root!r}
crop_size = ({size}, {size})
metainfo = dict(classes={classes!r}, palette={palette!r})
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=None),
    {heads})
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=crop_size, ratio_range=(1.0, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=crop_size, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
# The shapes classes are not ADE20K's 150: the generic dataset reads the same layout.
user_dataset = dict(_delete_=True, type='BaseSegDataset', data_root=data_root, metainfo=metainfo,
               img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True)
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(**user_dataset, pipeline=train_pipeline,
                 data_prefix=dict(img_path='images/training',
                                  seg_map_path='annotations/training')))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(**user_dataset, pipeline=test_pipeline,
                 data_prefix=dict(img_path='images/validation',
                                  seg_map_path='annotations/validation')))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={max_iters}, val_interval={max_iters})
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval={max_iters}))
'''


# The heads' class counts (and what a small image of three objects needs) of the other heads'
# user configs, by the base's name. Cascade R-CNN has one box head and one sampler per stage;
# DINO's 900 queries would outnumber a small image's encoder tokens (85 at 64 px, 4 scales);
# Mask2Former pads every batch to its 1024 px crop unless told the user's size, and weighs
# its 'no object' class in a list of num_classes + 1.
#
# DINO and Mask2Former are also narrowed to test size for the runs that test something
# other than the model (two-process training in test_distributed.py): the same head,
# matching and losses, with fewer layers, queries and sampled points;
# tests/test_configs/test_every_model.py gives them back their configured depths. DINO keeps
# two decoder layers (a refined box, an intermediate 'd0.' loss);
# Mask2Former's decoder keeps one layer per attention level (its 9 are 3 rounds of the 3) and
# samples as many mask points as its stride-4 mask has pixels (not 12544 of 1024 px).
# Cascade R-CNN keeps its three stages, with half the proposals of the Mask R-CNN user config
# and a quarter of its RoIs (16 an image, 4 of them positive at most): its box heads' four
# 3x3 convs and its mask heads run on every RoI of each stage, most of its iteration, and
# three objects need no more. All train on HEAD_IMAGE_SIZE images.
DINO_LAYERS = dict(encoder=1, decoder=2)
MASK2FORMER_LAYERS = dict(pixel_decoder=1, decoder=3)


def head_loss_keys(base: str, decoder_layers: Optional[int] = None) -> set:
    """The loss keys that training a user config of ``base`` (a config's file name) logs
    beyond ``loss``: each kind of loss of its head and, for DINO and Mask2Former, the last
    intermediate decoder layer's (its ``d<i>.`` prefix depends on the decoder layers:
    ``decoder_layers``, by default the ones kept above)."""
    name = osp.basename(base)
    m2f = f"d{(decoder_layers or MASK2FORMER_LAYERS['decoder']) - 1}."
    if name.startswith('mask_rcnn'):
        return {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'loss_bbox', 'loss_mask'}
    if name.startswith('retinanet'):
        return {'loss_cls', 'loss_bbox'}
    if name.startswith('upernet'):
        return {'decode.loss_ce', 'aux.loss_ce'}
    if name.startswith('cascade_mask_rcnn'):
        return {'loss_rpn_cls', 's0.loss_cls', 's2.loss_bbox', 's2.loss_mask'}
    if name.startswith('dino'):
        return {'loss_cls', 'loss_bbox', 'loss_iou', 'dn_loss_cls', 'enc_loss_cls',
                f"d{(decoder_layers or DINO_LAYERS['decoder']) - 2}.loss_cls"}
    if name.startswith('mask2former'):
        keys = {'loss_cls', 'loss_mask', 'loss_dice', m2f + 'loss_mask', m2f + 'loss_dice'}
        return keys if '_coco' in name else {'decode.' + k for k in keys}
    if name.startswith('sem_fpn'):
        return {'decode.loss_ce'}
    raise ValueError(f'head_loss_keys: no loss keys known for {name}')


_MASK2FORMER_NARROW = (
    "num_queries=20,\n"
    "{indent}pixel_decoder=dict(encoder=dict(num_layers=%d)),\n"
    "{indent}transformer_decoder=dict(num_layers=%d)" % (
        MASK2FORMER_LAYERS['pixel_decoder'], MASK2FORMER_LAYERS['decoder']))
# MMDetection hands the model's train_cfg to the head; MMSegmentation's head has its own.
_MASK2FORMER_POINTS = 'train_cfg=dict(num_points=({size} // 4) ** 2)'

_DET_HEADS = {
    'cascade_mask_rcnn': (
        'roi_head=dict(bbox_head=[dict(h, num_classes=len(classes)) '
        'for h in _base_.model.roi_head.bbox_head],\n'
        '                  mask_head=dict(num_classes=len(classes))),\n    '
        'train_cfg=dict(rpn_proposal=dict(nms_pre=100, max_per_img=50),\n'
        "                   rcnn=[dict(c, sampler=dict(c['sampler'], num=16)) "
        'for c in _base_.model.train_cfg.rcnn]),\n    '
        'test_cfg=dict(rpn=dict(nms_pre=100, max_per_img=20), rcnn=dict(max_per_img=10))'),
    'dino': ('bbox_head=dict(num_classes=len(classes)), num_queries=30,\n    '
             f"encoder=dict(num_layers={DINO_LAYERS['encoder']}), "
             f"decoder=dict(num_layers={DINO_LAYERS['decoder']}),\n    "
             'dn_cfg=dict(group_cfg=dict(num_dn_queries=10)), test_cfg=dict(max_per_img=20)'),
    'mask2former': (
        'data_preprocessor=dict(batch_augments=[dict(\n'
        "        type='BatchFixedSizePad', size=({size}, {size}), img_pad_value=0, "
        'pad_mask=True,\n        mask_pad_value=0, pad_seg=False)]),\n    '
        'panoptic_head=dict(num_things_classes=len(classes), num_stuff_classes=0,\n'
        '                       loss_cls=dict(class_weight=[1.0] * len(classes) + [0.1]),\n'
        + ' ' * 23 + _MASK2FORMER_NARROW.format(indent=' ' * 23) + '),\n'
        '    panoptic_fusion_head=dict(num_things_classes=len(classes), '
        'num_stuff_classes=0),\n    '
        # Instances are the top scores of queries x classes: at most 20 x 3 here.
        + _MASK2FORMER_POINTS + ', test_cfg=dict(max_per_image=20)'),
}
_SEG_HEADS = {
    'upernet': ("decode_head=dict(num_classes=len(metainfo['classes'])),\n    "
                "auxiliary_head=dict(num_classes=len(metainfo['classes']))"),
    'sem': "decode_head=dict(num_classes=len(metainfo['classes']))",
    'mask2former': ("decode_head=dict(num_classes=len(metainfo['classes']),\n"
                    "                     loss_cls=dict(class_weight=[1.0] * "
                    "len(metainfo['classes']) + [0.1]),\n"
                    + ' ' * 21 + _MASK2FORMER_NARROW.format(indent=' ' * 21) + ',\n'
                    + ' ' * 21 + _MASK2FORMER_POINTS + ')'),
}


# A user config's model at a fraction of CvT-13's widths: the same detector or segmentor on
# the same CvT (convolutional projections, drop path, the BatchNorm policy). For tests of the
# runner, the launchers, resuming and the data workers, where the width changes nothing but
# the time: an iteration ~15x faster, a checkpoint of 5 MB instead of 0.5 GB.
_NARROW_BACKBONE = """backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64],
                                num_heads=[1, 2, 4], depths=[1, 1, 2])),"""
_NARROW_MODEL = dict(det=f"""model = dict(
    {_NARROW_BACKBONE}
    neck=dict(in_channels=[16, 32, 64], out_channels=32),
    rpn_head=dict(in_channels=32, feat_channels=32),
    roi_head=dict(bbox_roi_extractor=dict(out_channels=32),
                  bbox_head=dict(in_channels=32, fc_out_channels=64),
                  mask_roi_extractor=dict(out_channels=32),
                  mask_head=dict(in_channels=32, conv_out_channels=32)))
""", seg=f"""model = dict(
    {_NARROW_BACKBONE}
    decode_head=dict(in_channels=[16, 32, 64], channels=32),
    auxiliary_head=dict(in_channels=64, channels=32))
""")


# The pause of paced runs (tests/paced_training.py; a training process finds it through
# PACED_ENV): long enough for a test's signal to land, short beside an iteration's start-up.
PACE = 0.5
PACED_ENV = dict(PYTHONPATH=osp.join(ROOT, 'tests'))

# glibc's default allocator for a process started from the suite, which `make test` runs
# under tools/misc/cpu_malloc.sh (for run_tool's env: None removes a variable).
DEFAULT_MALLOC_ENV = dict(MALLOC_MMAP_MAX_=None, MALLOC_TRIM_THRESHOLD_=None)


# Iterations of each two-process run of conftest's dist_train fixture: DDP's bookkeeping
# breaks on the second one, so run more.
DIST_ITERATIONS = 3


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (the kernel's pick), for a
    launcher's ``PORT`` / ``MASTER_PORT``."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


# Launched ranks report the gloo threads left at their exit (tests/exit_probe/sitecustomize.py).
EXIT_PROBE_ENV = dict(PYTHONPATH=osp.join(ROOT, 'tests', 'exit_probe'))


def assert_no_gloo_threads_at_exit(log: str, ranks: int) -> None:
    """Every one of ``ranks`` ranks run with ``EXIT_PROBE_ENV`` reported, in ``log``, that no
    gloo thread was left when it exited."""
    reports = re.findall(r'cvt_mm exit probe: rank (\d+), gloo threads: (\[.*\])', log)
    assert sorted(int(rank) for rank, _ in reports) == list(range(ranks)), \
        f'exit reports {reports}, expected one per rank of {ranks}:\n{log[-3000:]}'
    left = {rank: threads for rank, threads in reports if threads != '[]'}
    assert not left, f'gloo threads left at exit (the process group outlived the run): {left}'


def narrow_config(base: str, task: str, pace: float = 0.0) -> str:
    """Write ``<base>_narrow.py`` beside ``base`` (a user config of a CvT Mask R-CNN or
    UperNet): the same config with the narrow model above and, when ``pace`` > 0, a pause of
    ``pace`` seconds before every training iteration and checkpoint save
    (tests/paced_training.py: run the training process with ``PACED_ENV``), so
    that a test's signal sent after a checkpoint lands in the next iteration or in the save
    however fast the machine; paced runs also record the iterations they complete
    (:func:`executed_iterations`).

    Args:
        base (str): the config to narrow (a ``.py`` file).
        task (str): ``'det'`` (Mask R-CNN) or ``'seg'`` (UperNet).
        pace (float): seconds of pause; 0 for none. Defaults to 0.

    Returns:
        str: the new config's path.
    """
    if task not in _NARROW_MODEL:
        raise ValueError(f'narrow_config: task {task!r}; allowed: {sorted(_NARROW_MODEL)}')
    text = f'_base_ = {base!r}\n' + _NARROW_MODEL[task]
    if pace > 0:
        text += ("custom_imports = dict(imports=['cvt_mm', 'paced_training'],\n"
                 "                      allow_failed_imports=False)\n"
                 "custom_hooks = [*_base_.custom_hooks,  # the training guards\n"
                 f"                dict(type='PaceHook', seconds={pace}),\n"
                 "                dict(type='IterationRecordHook')]\n")
    path = base[:-len('.py')] + '_narrow.py'
    with open(path, 'w') as f:
        f.write(text)
    return path


def executed_iterations(work, rank: int = 0) -> list:
    """The training iterations (counted from 1) that rank ``rank`` of each run of a paced
    config (:func:`narrow_config`) in the work dir ``work`` completed, one list per process
    in the order the processes ran: a run, its torchrun restarts and its slurm requeues each
    add one.

    Example::

        >>> executed_iterations(work)  # killed in iteration 5, then resumed from iteration 4
        [[1, 2, 3, 4], [5, 6]]
    """
    runs = {}
    with open(osp.join(str(work), f'executed_iterations.rank{rank}.txt')) as f:
        for line in f:
            pid, iteration = line.split()
            runs.setdefault(pid, []).append(int(iteration))
    return list(runs.values())


# --------------------------------------------------------------------------------------------
# The repository's tools, run as a user runs them
# --------------------------------------------------------------------------------------------
def load_tool(name: str):
    """Import ``tools/<name>.py`` as a module (``name`` may hold a subfolder:
    ``'analysis_tools/gpu_check'``). Its folder is put on sys.path, as Python does when it
    runs a script, because a script may import a sibling (extract_backbone.py imports
    convert_weights.py); appended, not prepended, so tools/test.py cannot shadow the standard
    library's ``test`` package.

    Example::

        >>> args = load_tool('train').parse_args(['configs/mask_rcnn_cvt13_coco.py'])
    """
    return load_script(osp.join(TOOLS, f'{name}.py'))


def load_script(path: str):
    """Import the script at ``path`` as a module, as :func:`load_tool` does."""
    if osp.dirname(path) not in sys.path:
        sys.path.append(osp.dirname(path))
    name = osp.splitext(osp.relpath(path, ROOT))[0].replace('/', '_').replace('.', '')
    spec = importlib.util.spec_from_file_location(f'cvt_mm_script_{name}', path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# One per pytest process; its fork server ends with the process.
WARM_TOOLS = WarmTools(ROOT)


def run_tool(args, timeout: float = 300, env: Optional[dict] = None,
             expect_success: bool = True, cwd: Optional[str] = None, warm: bool = False
             ) -> subprocess.CompletedProcess:
    """Run ``tools/<args[0]>`` (python or bash) with ``args[1:]`` from ``cwd`` (default: the
    repository root); unless ``expect_success=False``, raise ``AssertionError`` with its
    output when it fails. ``env`` adds variables to this process's, or with a value of None
    removes them. ``warm=True`` runs a python tool in a fork of a process that has
    imported the stack already (tests/warm_tools.py: 9 s less a run; what that does not
    cover is written there)."""
    full_env = dict(os.environ, **(env or {}))
    full_env = {k: v for k, v in full_env.items() if v is not None}
    full_env['PYTHONPATH'] = ROOT + os.pathsep + full_env.get('PYTHONPATH', '')
    if args[0].endswith('.sh'):
        command = ['bash', osp.join(TOOLS, args[0]), *args[1:]]
        full_env.setdefault('PYTHON', sys.executable)
    else:
        command = [sys.executable, osp.join(TOOLS, args[0]), *args[1:]]
    if warm:
        if args[0].endswith('.sh'):
            raise ValueError(f'run_tool: warm=True runs python tools only, not {args[0]}')
        with tempfile.TemporaryDirectory() as logs:
            proc = WARM_TOOLS.run(command[1], command[2:], cwd or ROOT, full_env, timeout,
                                  osp.join(logs, 'tool'))
    else:
        proc = subprocess.run(command, cwd=cwd or ROOT, env=full_env, capture_output=True,
                              text=True, timeout=timeout)
    assert proc.returncode == 0 or not expect_success, (
        f'{" ".join(command)} failed ({proc.returncode}):\n'
        f'{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    return proc


def make_tiny_data(out: str) -> str:
    """Tiny COCO- and ADE20K-layout shapes datasets under ``out`` (4 train / 2 val images of
    ``IMAGE_SIZE`` px), written by the demo's own data tool."""
    load_tool('misc/make_demo_data').main([
        '--out', out, '--size', str(IMAGE_SIZE), '--coco-train', '4', '--coco-val', '2',
        '--ade-train', '4', '--ade-val', '2', '--max-objects', '3', '--seed', '1'])
    return out


def det_user_config(path: str, base: str, data_root: str, work_dir: str, max_epochs: int = 1,
                    **extra) -> str:
    """A user's config: inherit ``base`` (a file under configs/), train on the tiny
    COCO-layout shapes data with its three classes, from scratch, ``max_epochs`` epochs of
    2 iterations (4 images, batch 2) on one process."""
    return write_user_config(path, base, data_root, work_dir, image_size=IMAGE_SIZE,
                             max_epochs=max_epochs, **extra)


# Image (and crop) side of the user configs of the other heads (head_user_config): their
# training and evaluation cost scales with it, and their coarsest level (stride 64) is still
# one pixel.
HEAD_IMAGE_SIZE = 64


def head_of(config_name: str) -> str:
    """The head a config of ours is named for: ``'dino_4scale'`` for
    ``dino_4scale_cvt13_12e_coco.py`` (the name up to its backbone)."""
    return re.sub(r'_(cvt\d+|cmt_[a-z]+)_.*', '', osp.basename(config_name))


def head_user_config(path: str, base: str, tiny_data: str, work_dir: str, **extra) -> str:
    """A user's config of any head (:func:`write_user_config`) on the tiny data of its layout
    (``coco/`` or ``ade/`` under ``tiny_data``): Mask R-CNN and RetinaNet at the side of
    :func:`det_user_config`, UperNet at that of :func:`seg_user_config`, Cascade Mask R-CNN,
    DINO, Mask2Former and Semantic FPN at ``HEAD_IMAGE_SIZE``."""
    name = osp.basename(base)
    ade = name.endswith('_ade20k.py')
    size = IMAGE_SIZE if name.startswith(('mask_rcnn', 'retinanet')) else \
        64 if name.startswith('upernet') else HEAD_IMAGE_SIZE
    return write_user_config(path, base, osp.join(tiny_data, 'ade' if ade else 'coco'),
                             work_dir, image_size=size, **extra)


def seg_user_config(path: str, data_root: str, work_dir: str, max_iters: int = 2,
                    base: str = 'upernet_cvt13_ade20k.py', **extra) -> str:
    """A user's config: inherit a UperNet config at a 64 px crop on the tiny ADE-layout
    data, from scratch, ``max_iters`` iterations."""
    return write_user_config(path, base, data_root, work_dir, image_size=64,
                             max_iters=max_iters, **extra)
