"""docs/custom_data.md runs as written.

Each config on the page is taken from the page's text and saved under the name the page gives
it, in a project folder outside the checkout that has what the page assumes of the repository
root: a ``configs`` folder (a link to ours) and the ImageNet weights ``init_cfg`` names under
``checkpoints/`` (here random CvT-13 weights, in our layout, which the loader reads as it reads
the published files; there is no download). The data are written in the layout the page
shows, at the paths the config itself names, with the config's classes (the shapes of
``tools/misc/make_demo_data.py``, renamed). Then ``tools/train.py`` and ``tools/test.py`` run
from that folder as the page's commands do, with ``--cfg-options`` that only shrink images,
batches and the schedule. What a run writes
is checked: the checkpoint, its class names, the size of every head that classifies, the
metrics, and the toolboxes' inferencers naming predictions with the page's classes.

``ClassesCheckHook`` (which every config on the page enables) is checked here too: what it
says for each mistake it catches, and that the page's example message is what a user gets.
"""
import glob
import json
import os
import os.path as osp
import re
import shutil

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from PIL import Image

import cvt_mm  # registers the backbones and ClassesCheckHook
from cvt_mm.engine.hooks.classes_check_hook import (
    classifying_heads,
    data_problems,
    head_problems,
)

from helpers import ROOT, build_model_from_config, load_tool, run_tool

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

DOC = osp.join(ROOT, 'docs', 'custom_data.md')
BASES = {'mmdet': 'configs/mask_rcnn_cvt13_coco.py',
         'mmseg': 'configs/upernet_cvt13_ade20k.py',
         'mmpretrain': 'configs/imagenet_cvt13_300e_in1k.py'}
# Image side of the generated data, and the short side the tests shrink each task's images
# (and crops) to: the pipelines keep their transforms, only their sizes change.
DATA_SIZE, CLS_DATA_SIZE = 96, 64
TEST_SIDE = {'mmdet': 96, 'mmseg': 64, 'mmpretrain': 64}
# The shapes of make_demo_data.py in their label order (the COCO category order, the ADE label
# values 2-4, the sorted ImageNet-layout folders).
SHAPES = ('circle', 'square', 'triangle')


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------
def page_configs() -> dict:
    """``{default_scope: (file name, config text)}`` of the page's configs: each python block
    introduced by its file name ("`name.py`:")."""
    with open(DOC) as f:
        text = f.read()
    configs = {}
    for name, block in re.findall(r'`([\w.-]+\.py)`:\n\n```python\n(.*?)```', text, re.S):
        base = re.match(r"_base_ = '([^']+)'", block).group(1)
        (scope, ) = [s for s, b in BASES.items() if b == base]
        configs[scope] = (name, block)
    return configs


def page_commands() -> list:
    with open(DOC) as f:
        text = f.read()
    return [line.split('  #')[0].strip() for block in re.findall(r'```bash\n(.*?)```', text, re.S)
            for line in block.splitlines() if line.strip()]


def test_the_page_has_one_config_per_task_and_its_commands():
    configs = page_configs()
    assert set(configs) == set(BASES)
    with open(DOC) as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    assert len(blocks) == len(configs)  # every python block of the page is one of them
    commands = page_commands()
    for name, text in configs.values():
        stem = osp.splitext(name)[0]
        assert f'python tools/train.py {name}' in ' '.join(commands), name
        (test, ) = [c for c in commands if c.startswith(f'python tools/test.py {name} ')]
        # The checkpoint the page evaluates is where the training command writes.
        assert test.split()[-1].startswith(f'work_dirs/{stem}/'), test
        assert "custom_hooks = [*_base_.custom_hooks, dict(type='ClassesCheckHook')]" in text, name


# --------------------------------------------------------------------------------------------
# A user's project folder, the page's configs in it, their data in the page's layouts
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def project(tmp_path_factory):
    """The folder the page's commands run in: ``configs`` (ours), the ImageNet weights the
    configs' ``init_cfg`` name, the page's configs, and the shapes datasets they derive from
    (under ``source/``)."""
    root = tmp_path_factory.mktemp('project')
    os.symlink(osp.join(ROOT, 'configs'), root / 'configs')
    # What download_checkpoints.py would put there: a CvT-13 ImageNet classifier's weights
    # (random here), its 1000-class layer included, in a layout the loader recognises.
    from cvt_mm.models.cvt import CvT
    (root / 'checkpoints').mkdir()
    torch.save(CvT(arch='13', num_classes=1000).state_dict(),
               root / 'checkpoints' / 'CvT-13-224x224-IN-1k.pth')
    for name, text in page_configs().values():
        (root / name).write_text(text)
    load_tool('misc/make_demo_data').main([
        '--out', str(root / 'source'), '--size', str(DATA_SIZE), '--coco-train', '4',
        '--coco-val', '2', '--ade-train', '4', '--ade-val', '2', '--imagenet-train', '6',
        '--imagenet-val', '3', '--imagenet-size', str(CLS_DATA_SIZE), '--max-objects', '3',
        '--seed', '1'])
    return root


def load_page_config(project, scope: str) -> Config:
    name, _ = page_configs()[scope]
    return Config.fromfile(str(project / name))


def page_classes(cfg) -> tuple:
    return tuple(cfg.train_dataloader.dataset.metainfo['classes'])


def write_coco_layout(project, cfg) -> None:
    """The shapes COCO set at the config's ``ann_file`` / ``data_prefix`` paths, its three
    categories renamed to the config's classes (in the files' order, as the page asks)."""
    classes = page_classes(cfg)
    assert len(classes) == len(SHAPES), f'the page has {classes}; the test data has 3 classes'
    source = project / 'source' / 'coco'
    for split, loader in (('train', cfg.train_dataloader), ('val', cfg.val_dataloader)):
        dataset = loader.dataset
        ann_file = project / dataset.data_root / dataset.ann_file
        img_dir = project / dataset.data_root / dataset.data_prefix.img
        with open(source / 'annotations' / f'instances_{split}2017.json') as f:
            coco = json.load(f)
        for category in coco['categories']:
            category['name'] = classes[SHAPES.index(category['name'])]
        ann_file.parent.mkdir(parents=True, exist_ok=True)
        ann_file.write_text(json.dumps(coco))
        shutil.copytree(source / f'{split}2017', img_dir)
    assert osp.isfile(project / cfg.val_evaluator.ann_file)


def write_seg_layout(project, cfg) -> None:
    """The shapes ADE20K set as image and mask folders at the config's ``data_prefix`` paths,
    relabelled to the page's convention: 0 background, 1-3 the shapes (the config's classes),
    255 the unlabelled band around each object (ADE's 0)."""
    classes = page_classes(cfg)
    assert len(classes) == 1 + len(SHAPES), classes
    source = project / 'source' / 'ade'
    for split, loader in (('training', cfg.train_dataloader), ('validation', cfg.val_dataloader)):
        dataset = loader.dataset
        assert not dataset.reduce_zero_label  # the convention the page's text describes
        img_dir = project / dataset.data_root / dataset.data_prefix.img_path
        ann_dir = project / dataset.data_root / dataset.data_prefix.seg_map_path
        img_dir.mkdir(parents=True)
        ann_dir.mkdir(parents=True)
        for image in sorted(glob.glob(str(source / 'images' / split / '*.jpg'))):
            stem = osp.splitext(osp.basename(image))[0]
            shutil.copy(image, img_dir / (stem + dataset.img_suffix))
            ade = np.asarray(Image.open(source / 'annotations' / split / f'{stem}.png'))
            label = np.where(ade == 0, 255, ade.astype(np.int64) - 1).astype(np.uint8)
            Image.fromarray(label).save(ann_dir / (stem + dataset.seg_map_suffix))


def write_class_folders(project, cfg) -> None:
    """The ImageNet-layout shapes as one folder per class of the config, at its
    ``data_prefix`` folders."""
    classes = page_classes(cfg)
    assert len(classes) == len(SHAPES) and list(classes) == sorted(classes), classes
    source = project / 'source' / 'imagenet'
    for split, loader in (('train', cfg.train_dataloader), ('val', cfg.val_dataloader)):
        dataset = loader.dataset
        for shape, name in zip(SHAPES, classes):
            shutil.copytree(source / split / shape,
                            project / dataset.data_root / dataset.data_prefix / name)


WRITERS = {'mmdet': write_coco_layout, 'mmseg': write_seg_layout,
           'mmpretrain': write_class_folders}


# --------------------------------------------------------------------------------------------
# Test-sized runs: only sizes, batches and the schedule change
# --------------------------------------------------------------------------------------------
def _scaled(value, factor: float):
    if isinstance(value, int):
        return max(32, round(value * factor))
    return tuple(max(32, round(v * factor)) for v in value)


def _option(value) -> str:
    return str(value).replace(' ', '')


def shrink_options(cfg, scope: str) -> list:
    """``--cfg-options`` that run ``cfg`` at test size: every image and crop size of its
    pipelines (and the segmentor's padding size) scaled by one factor, small batches, no
    data workers, two training iterations, logs every iteration. Detection also samples
    fewer proposals (as configs/demo/ does for small images)."""
    reference = {'mmdet': 800, 'mmseg': 512, 'mmpretrain': 224}[scope]
    factor = TEST_SIDE[scope] / reference
    options = ['default_hooks.logger.interval=1', 'randomness.seed=0']
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options += [f'{loader}.num_workers=0', f'{loader}.persistent_workers=False',
                    f'{loader}.batch_size={3 if loader == "train_dataloader" else 1}']
        for i, transform in enumerate(cfg[loader].dataset.pipeline):
            for key in ('scale', 'crop_size'):
                if key in transform:
                    options.append(f'{loader}.dataset.pipeline.{i}.{key}='
                                   + _option(_scaled(transform[key], factor)))
    if scope == 'mmdet':  # 4 images, batch 3 ... two iterations
        options += ['train_dataloader.batch_size=2', 'train_cfg.max_epochs=1',
                    'train_cfg.val_interval=1',
                    'model.train_cfg.rpn_proposal.nms_pre=200',
                    'model.train_cfg.rpn_proposal.max_per_img=100',
                    'model.train_cfg.rcnn.sampler.num=64',
                    'model.test_cfg.rpn.nms_pre=200', 'model.test_cfg.rpn.max_per_img=50',
                    'model.test_cfg.rcnn.max_per_img=10']
    elif scope == 'mmseg':
        side = TEST_SIDE[scope]
        options += ['train_dataloader.batch_size=2', 'train_cfg.max_iters=2',
                    'train_cfg.val_interval=2', 'default_hooks.checkpoint.interval=2',
                    f'model.data_preprocessor.size=({side},{side})']
    else:  # 6 images, batch 3: two iterations
        options += ['train_cfg.max_epochs=1', 'default_hooks.checkpoint.save_best=None']
    return options


CHECKPOINTS = {'mmdet': 'epoch_1.pth', 'mmseg': 'iter_2.pth', 'mmpretrain': 'epoch_1.pth'}
METRICS = {'mmdet': ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50'),
           'mmseg': ('aAcc', 'mIoU', 'mAcc'),
           'mmpretrain': ('accuracy/top1', )}


@pytest.fixture(scope='module')
def runs(project):
    """``runs(scope)`` -> (config path, Config, checkpoint, train process, test process): the
    page's config of that task trained and evaluated from the project folder."""
    done = {}

    def run(scope):
        if scope not in done:
            cfg = load_page_config(project, scope)
            WRITERS[scope](project, cfg)
            name = page_configs()[scope][0]
            options = shrink_options(cfg, scope)
            train = run_tool(['train.py', name, '--cfg-options', *options], cwd=str(project),
                             timeout=900, warm=True)
            checkpoint = project / 'work_dirs' / osp.splitext(name)[0] / CHECKPOINTS[scope]
            test = run_tool(['test.py', name, str(checkpoint), '--cfg-options', *options],
                            cwd=str(project), timeout=600, warm=True)
            done[scope] = (str(project / name), cfg, checkpoint, train, test)
        return done[scope]

    return run


# Output layers that have one row per class: (state_dict key, rows for N classes).
CLASS_LAYERS = {
    'mmdet': [('roi_head.bbox_head.fc_cls.weight', lambda n: n + 1),  # + background
              ('roi_head.bbox_head.fc_reg.weight', lambda n: 4 * n),   # a box per class
              ('roi_head.mask_head.conv_logits.weight', lambda n: n)],
    'mmseg': [('decode_head.conv_seg.weight', lambda n: n),
              ('auxiliary_head.conv_seg.weight', lambda n: n)],
    'mmpretrain': [('backbone.head.weight', lambda n: n)],
}


@pytest.mark.parametrize('scope', sorted(BASES))
def test_page_config_trains_and_evaluates(runs, scope):
    _, cfg, checkpoint, train, test = runs(scope)
    classes = page_classes(cfg)
    assert osp.isfile(checkpoint)
    log = train.stdout + train.stderr
    assert 'ClassesCheckHook' in log  # the page's check ran, and let the run through
    ckpt = torch.load(checkpoint, map_location='cpu', weights_only=False)
    # What the inferencers will name predictions with.
    assert tuple(ckpt['meta']['dataset_meta']['classes']) == classes
    for key, rows in CLASS_LAYERS[scope]:
        assert ckpt['state_dict'][key].shape[0] == rows(len(classes)), key
    if scope == 'mmdet':  # the RPN stays class-agnostic: one objectness score per anchor
        assert ckpt['state_dict']['rpn_head.rpn_cls.weight'].shape[0] == 3  # 3 anchors
    results = test.stdout + test.stderr
    for metric in METRICS[scope]:
        value = re.search(rf'{re.escape(metric)}: (-?[\d.]+)', results)
        assert value is not None, (metric, results[-3000:])
        assert 0 <= float(value.group(1)) <= (1 if scope == 'mmdet' else 100)


@pytest.mark.parametrize('scope', sorted(BASES))
def test_every_head_of_the_page_config_has_its_classes(project, scope):
    """The built model of each page config: every head that classifies has len(classes)
    outputs, and ClassesCheckHook finds nothing to say."""
    cfg = load_page_config(project, scope)
    model = build_model_from_config(cfg)
    heads = classifying_heads(model)
    expected = {'mmdet': {'roi_head.bbox_head', 'roi_head.mask_head'},
                'mmseg': {'decode_head', 'auxiliary_head'},
                'mmpretrain': {'backbone', 'data_preprocessor'}}[scope]
    assert {name for name, _, _ in heads} == expected
    assert all(n == len(page_classes(cfg)) for _, _, n in heads)
    assert head_problems(model, page_classes(cfg), 'train') == []


@pytest.mark.parametrize('scope', sorted(BASES))
def test_inferencer_names_predictions_with_the_page_classes(runs, project, scope, monkeypatch):
    """The "Predict" step: the toolbox's inferencer on the trained checkpoint."""
    config, cfg, checkpoint, _, _ = runs(scope)
    classes = page_classes(cfg)
    image = sorted(glob.glob(str(project / 'source' / 'coco' / 'val2017' / '*.jpg')))[0]
    monkeypatch.chdir(project)
    cvt_mm.setup_process()  # as docs/python_api.md: safe loading of training's checkpoints
    # An inferencer leaves its toolbox's default scope set; the overwrite gives this test's
    # process back as it was (docs/python_api.md).
    with DefaultScope.overwrite_default_scope(scope):
        if scope == 'mmdet':
            from mmdet.apis import DetInferencer
            # Two iterations of training score every class low: keep every RoI's prediction,
            # so that there are labels to check.
            detector_cfg = Config.fromfile(config)
            detector_cfg.model.test_cfg.rcnn.score_thr = 0.0
            inferencer = DetInferencer(model=detector_cfg, weights=str(checkpoint),
                                       device='cpu', show_progress=False)
            pred = inferencer(image)['predictions'][0]
            assert pred['labels'] and all(0 <= label < len(classes) for label in pred['labels'])
            names = inferencer.model.dataset_meta['classes']
        elif scope == 'mmseg':
            from mmseg.apis import MMSegInferencer
            inferencer = MMSegInferencer(model=config, weights=str(checkpoint), device='cpu')
            pred = inferencer(image)['predictions']
            assert pred.shape == (DATA_SIZE, DATA_SIZE) and pred.max() < len(classes)
            names = inferencer.model.dataset_meta['classes']
        else:
            from mmpretrain import ImageClassificationInferencer
            inferencer = ImageClassificationInferencer(model=config, pretrained=str(checkpoint),
                                                       device='cpu')
            (pred, ) = inferencer(image)
            assert pred['pred_class'] == classes[pred['pred_label']]
            names = inferencer.classes
    assert tuple(names) == classes


# --------------------------------------------------------------------------------------------
# Mistakes: what ClassesCheckHook says
# --------------------------------------------------------------------------------------------
def fenced_blocks(text: str) -> list:
    """``(language, body)`` of every fenced block, openers and closers paired in order (a
    closing fence looks like an opening one without a language)."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        if line.startswith('```'):
            if language is None:
                language, body = line[3:].strip(), []
            else:
                blocks.append((language, '\n'.join(body)))
                language = None
        elif language is not None:
            body.append(line)
    return blocks


def page_error_lines() -> list:
    """The lines of the page's example ClassesCheckHook message."""
    with open(DOC) as f:
        (block, ) = [body for language, body in fenced_blocks(f.read())
                     if 'disagree on the classes' in body]
    return [line for line in block.splitlines() if line.strip()]


def test_a_forgotten_head_stops_training_with_the_pages_message(runs, project):
    """The page's example: the detection config with mask_head left at COCO's 80 classes.
    tools/train.py stops before the first iteration and prints what the page shows."""
    config, cfg, _, _, _ = runs('mmdet')  # its data are written
    options = shrink_options(cfg, 'mmdet') + ['model.roi_head.mask_head.num_classes=80']
    proc = run_tool(['train.py', config, '--work-dir', str(project / 'forgotten'),
                     '--cfg-options', *options], cwd=str(project), expect_success=False, warm=True)
    assert proc.returncode != 0
    for line in page_error_lines():
        assert line in proc.stderr, (line, proc.stderr[-3000:])
    assert 'Epoch(train)' not in proc.stdout + proc.stderr  # not one iteration ran
    assert not glob.glob(str(project / 'forgotten' / '*.pth'))


@pytest.mark.parametrize('scope, key, value, message', [
    ('mmdet', 'roi_head.bbox_head.num_classes', 80,
     'model.roi_head.bbox_head.num_classes is 80 (Shared2FCBBoxHead), but the train dataset '
     'has 3 classes: set model.roi_head.bbox_head.num_classes=3'),
    ('mmseg', 'decode_head.num_classes', 150,
     'model.decode_head.num_classes is 150 (UPerHead), but the train dataset has 4 classes: '
     'set model.decode_head.num_classes=4'),
    ('mmseg', 'auxiliary_head.num_classes', 150,
     'model.auxiliary_head.num_classes is 150 (FCNHead)'),
    ('mmpretrain', 'backbone.num_classes', 1000,
     'model.backbone.num_classes is 1000 (CvT), but the train dataset has 3 classes'),
    # Our classification configs set it at the top level, which the runner gives the model.
    ('mmpretrain', 'data_preprocessor.num_classes', 1000,
     'data_preprocessor.num_classes is 1000 (ClsDataPreprocessor), but the train dataset has '
     '3 classes: set data_preprocessor.num_classes=3'),
])
def test_each_forgotten_head_is_named(project, scope, key, value, message):
    cfg = load_page_config(project, scope)
    cfg.merge_from_dict({key if key.startswith('data_preprocessor') else f'model.{key}': value})
    model = build_model_from_config(cfg)
    problems = head_problems(model, page_classes(cfg), 'train')
    assert len(problems) == 1 and message in problems[0], problems


@pytest.fixture
def coco_dataset(runs, project):
    """``coco_dataset(classes)``: MMDetection's CocoDataset on the page's train annotations."""
    _, cfg, _, _, _ = runs('mmdet')

    def build(classes):
        from mmdet.datasets import CocoDataset
        dataset = cfg.train_dataloader.dataset
        return CocoDataset(data_root=str(project / dataset.data_root), ann_file=dataset.ann_file,
                           data_prefix=dict(dataset.data_prefix),
                           metainfo=dict(classes=classes), pipeline=[])

    return build


def test_coco_classes_with_a_typo_or_in_another_order_are_refused(coco_dataset):
    ok = coco_dataset(('bolt', 'nut', 'washer'))
    assert data_problems(ok, 'train') == []
    # A typo: MMDetection would silently train two classes, 'washer' labelled 1 ('nutt').
    (typo, ) = data_problems(coco_dataset(('bolt', 'nutt', 'washer')), 'train')
    assert "'nutt' of the train classes are not category names of" in typo
    assert "whose categories are ('bolt', 'nut', 'washer')" in typo
    # Another order: MMDetection numbers the file's categories, so names would swap.
    swapped = coco_dataset(('nut', 'bolt', 'washer'))
    assert swapped.cat_ids == ok.cat_ids  # the labels do not follow `classes`
    (order, ) = data_problems(swapped, 'train')
    assert "write classes=('bolt', 'nut', 'washer')" in order


def test_class_folders_in_another_order_are_refused(runs, project):
    _, cfg, _, _, _ = runs('mmpretrain')
    from mmpretrain.datasets import CustomDataset
    dataset = cfg.train_dataloader.dataset

    def build(classes):
        return CustomDataset(data_root=str(project / dataset.data_root),
                             data_prefix=dataset.data_prefix, metainfo=dict(classes=classes),
                             pipeline=[])

    assert data_problems(build(('bolt', 'nut', 'washer')), 'train') == []
    # MMPretrain accepts it (same count), and would call every bolt a 'washer'.
    (problem, ) = data_problems(build(('washer', 'bolt', 'nut')), 'train')
    assert "in sorted order ('bolt', 'nut', 'washer')" in problem
    assert "write classes=('bolt', 'nut', 'washer')" in problem


def test_a_val_set_without_the_classes_is_refused(runs, project):
    """A val dataloader left without metainfo evaluates with COCO's 80 classes: stopped at the
    start of training, naming both sets."""
    config, cfg, _, _, _ = runs('mmdet')
    options = shrink_options(cfg, 'mmdet') + ['val_dataloader.dataset.metainfo=None']
    proc = run_tool(['train.py', config, '--work-dir', str(project / 'no_val_classes'),
                     '--cfg-options', *options], cwd=str(project), expect_success=False,
                    warm=True)
    assert proc.returncode != 0
    assert re.search(r"the val dataset has the classes \('person', 'bicycle', .*\), the train "
                     r"dataset \('bolt', 'nut', 'washer'\): give both the same metainfo",
                     proc.stderr), proc.stderr[-3000:]


def test_a_test_set_without_the_classes_stops_testing(runs, project):
    """tools/test.py with the test set left at COCO's 80 classes: the checkpoint fits the
    model, so only ClassesCheckHook can tell, and it does before the first image."""
    config, cfg, checkpoint, _, _ = runs('mmdet')
    options = shrink_options(cfg, 'mmdet') + ['test_dataloader.dataset.metainfo=None']
    proc = run_tool(['test.py', config, str(checkpoint), '--work-dir',
                     str(project / 'no_test_classes'), '--cfg-options', *options],
                    cwd=str(project), expect_success=False, warm=True)
    assert proc.returncode != 0
    assert ('model.roi_head.bbox_head.num_classes is 3 (Shared2FCBBoxHead), but the test '
            'dataset has 80 classes: give it the classes the model was trained with '
            '(metainfo=dict(classes=...)), or set model.roi_head.bbox_head.num_classes=80'
            in proc.stderr), proc.stderr[-3000:]
    assert 'coco/bbox_mAP' not in proc.stdout + proc.stderr


# --------------------------------------------------------------------------------------------
# Label values that are no class: one error naming the file, the values and the classes
# --------------------------------------------------------------------------------------------
# The page's segmentation config on another head, as its "Other heads" section says: the base
# and the heads that classify change, the data settings stay.
OTHER_HEADS = {
    'upernet': None,
    'mask2former': ('configs/mask2former_cvt13_ade20k.py', (
        'model = dict(backbone=dict(norm_eval=True), decode_head=dict(num_classes=num_classes,\n'
        '    loss_cls=dict(class_weight=[1.0] * num_classes + [0.1])))\n')),
    'sem_fpn': ('configs/sem_fpn_cvt13_ade20k.py', (
        'model = dict(backbone=dict(norm_eval=True),\n'
        '             decode_head=dict(num_classes=num_classes))\n')),
}


def page_seg_config_on(project, head: str) -> str:
    """The page's segmentation config, or that config on another head, in the project."""
    name, text = page_configs()['mmseg']
    if OTHER_HEADS[head] is None:
        return name
    base, model = OTHER_HEADS[head]
    text = text.replace(f"_base_ = '{BASES['mmseg']}'", f"_base_ = '{base}'")
    text, replaced = re.subn(r'model = dict\(\n.*?\)\)\n', model, text, count=1, flags=re.S)
    assert replaced == 1 and base in text
    name = name.replace('upernet', head)
    (project / name).write_text(text)
    return name


def page_stray_label_lines() -> list:
    """The lines of the page's example error for a label value that is no class."""
    with open(DOC) as f:
        (block, ) = [body for language, body in fenced_blocks(f.read())
                     if 'neither a class index nor the ignore index' in body]
    return block.splitlines()


@pytest.fixture(scope='module')
def stray_seg_data(runs, project):
    """The page's segmentation data copied to ``data/parts_seg_stray/``, with the value 9
    where the background (0) was in one train and one val label map: (data root, {split:
    that file's path as the dataset names it})."""
    _, cfg, _, _, _ = runs('mmseg')  # its data are written
    root, stray = cfg.train_dataloader.dataset.data_root.rstrip('/') + '_stray/', {}
    shutil.copytree(project / cfg.train_dataloader.dataset.data_root, project / root)
    for split, loader in (('train', cfg.train_dataloader), ('val', cfg.val_dataloader)):
        path = sorted(glob.glob(str(project / root / loader.dataset.data_prefix.seg_map_path
                                    / '*.png')))[1]
        label = np.array(Image.open(path))
        assert (label == 0).any()
        label[label == 0] = 9
        Image.fromarray(label).save(path)
        stray[split] = osp.relpath(path, project)
    return root, stray


def stray_options(cfg, root) -> list:
    return shrink_options(cfg, 'mmseg') + [
        f'{loader}.dataset.data_root={root}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')]


@pytest.mark.parametrize('head', list(OTHER_HEADS))
def test_a_label_value_that_is_no_class_stops_training_with_one_error(
        runs, project, stray_seg_data, head):
    """4 classes, and a label map that holds 9 (neither a class index nor the ignore index
    255): tools/train.py stops at the first batch that holds it, before the model sees it,
    with one error naming the file, the value, the classes, the ignore index and the fixes.
    The batch holds every train image: not one iteration runs."""
    _, cfg, _, _, _ = runs('mmseg')
    root, stray = stray_seg_data
    name = page_seg_config_on(project, head)
    work = project / f'stray_{head}'
    proc = run_tool(['train.py', name, '--work-dir', str(work), '--cfg-options',
                     *stray_options(cfg, root), 'train_dataloader.batch_size=4'],
                    cwd=str(project), expect_success=False, warm=True)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith('ValueError: ')]
    assert len(errors) == 1, proc.stderr[-3000:]
    (error, ) = errors
    assert error == ('ValueError: label values that are neither a class index nor the '
                     'ignore index, in the train data:'), proc.stderr[-3000:]
    # The file and its value, then the page's example from its third line on: the classes,
    # the ignore index and the ways out.
    assert f'\n  {stray["train"]}: 9\n' in proc.stderr, proc.stderr[-3000:]
    for line in page_stray_label_lines()[2:]:
        assert line in proc.stderr, (line, proc.stderr[-3000:])
    assert 'Iter(train)' not in proc.stdout + proc.stderr  # not one iteration ran
    assert not glob.glob(str(work / '*.pth'))


@pytest.mark.parametrize('split', ['val', 'test'])
def test_a_label_value_that_is_no_class_stops_validation_and_testing(
        runs, project, stray_seg_data, split):
    """IoUMetric would count the value in no class and print an mIoU: validation during
    training (on clean train data) and tools/test.py stop at the image instead, with the same
    error."""
    _, cfg, checkpoint, _, _ = runs('mmseg')
    root, stray = stray_seg_data
    name, work = page_configs()['mmseg'][0], str(project / f'stray_{split}')
    options = stray_options(cfg, root)
    if split == 'val':
        options.append(f'train_dataloader.dataset.data_root={cfg.train_dataloader.dataset.data_root}')
        args = ['train.py', name, '--work-dir', work, '--cfg-options', *options]
    else:
        args = ['test.py', name, str(checkpoint), '--work-dir', work, '--cfg-options', *options]
    proc = run_tool(args, cwd=str(project), expect_success=False, warm=True)
    assert proc.returncode != 0
    assert ('ValueError: label values that are neither a class index nor the ignore index, in '
            f'the {split} data:\n  {stray["val"]}: 9\n') in proc.stderr, proc.stderr[-3000:]
    assert not re.search(r'mIoU: [\d.]+', proc.stdout + proc.stderr)  # no metric printed


def test_the_label_map_way_out_maps_the_stray_value_to_the_ignore_index(
        runs, project, stray_seg_data):
    """The fix the error names for values of another numbering: a dataset type whose METAINFO
    names every value of the files, with the page's classes as ``metainfo``. MMSegmentation's
    LoadAnnotations then maps 9 to 255, and the check lets the batch through."""
    _, cfg, _, _, _ = runs('mmseg')
    root, stray = stray_seg_data[0], stray_seg_data[1]['train']
    from mmseg.datasets import BaseSegDataset
    from mmseg.datasets.transforms import LoadAnnotations, PackSegInputs

    from cvt_mm.engine.hooks.classes_check_hook import stray_labels

    classes = page_classes(cfg)

    class TenValues(BaseSegDataset):
        METAINFO = dict(classes=classes + tuple(f'value {v}' for v in range(4, 10)))

    dataset = cfg.train_dataloader.dataset
    samples = {}
    for kind, dataset_type in (('as is', BaseSegDataset), ('mapped', TenValues)):
        built = dataset_type(
            data_root=str(project / root), data_prefix=dict(dataset.data_prefix),
            img_suffix=dataset.img_suffix, seg_map_suffix=dataset.seg_map_suffix,
            metainfo=dict(classes=classes), pipeline=[LoadAnnotations(), PackSegInputs()])
        samples[kind] = [built[i]['data_samples'] for i in range(len(built))]
    problem = stray_labels(samples['as is'], classes, 255, 'train')
    assert f'{osp.basename(stray)}: 9' in problem
    assert stray_labels(samples['mapped'], classes, 255, 'train') == ''
    (mapped, ) = [s for s in samples['mapped'] if s.seg_map_path.endswith(osp.basename(stray))]
    assert 255 in mapped.gt_sem_seg.data and 9 not in mapped.gt_sem_seg.data
