"""ImageNet pretraining with MMPretrain: the classification configs train and evaluate through
tools/train.py / tools/test.py on a tiny ImageNet-layout set made here, and what they write
initialises the detection and segmentation configs' backbones."""
import glob
import json
import math
import os.path as osp
import pickle
import re

import numpy as np
import pytest
import torch
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint
from PIL import Image

import cvt_mm  # noqa: F401  (registers CvT/CMT, allow-lists MMEngine checkpoint types)
from cvt_mm.checkpoint import CheckpointError, convert_checkpoint, read_checkpoint
from cvt_mm.models.cmt import ARCH_SETTINGS as CMT_ARCHS
from cvt_mm.models.cvt import CvT

from helpers import ROOT, load_tool, repo_config

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

CONFIGS = osp.join(ROOT, 'configs')
NUM_CLASSES = 5  # >= 5 so that top-5 accuracy is defined
TRAIN_PER_CLASS = 2
TRAIN_BATCH = 5
IMG_SIZE = 64  # the configs' full pipelines, at a resolution a CPU test can afford
CLS_CONFIGS = {
    'imagenet_cvt13_300e_in1k.py': ('CvT', None),
    'imagenet_cvt21_300e_in1k.py': ('CvT', None),
    'imagenet_cmt_ti_800e_in1k.py': ('CMT', 'ti'),
    'imagenet_cmt_xs_400e_in1k.py': ('CMT', 'xs'),
    'imagenet_cmt_s_300e_in1k.py': ('CMT', 's'),
    'imagenet_cmt_b_300e_in1k.py': ('CMT', 'b'),
}




train_tool, test_tool, extract_tool = (
    load_tool(n) for n in ('train', 'test', 'model_converters/extract_backbone'))


# ------------------------------------------------------------------------------------------
# A tiny ImageNet in MMPretrain's layout
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def imagenet_root(tmp_path_factory):
    """data/imagenet/{train/<wnid>/*.JPEG, val/*.JPEG, meta/{train,val}.txt}; each class has
    its own colour so the images are not all alike."""
    root = tmp_path_factory.mktemp('data') / 'imagenet'
    rng = np.random.default_rng(0)
    train_lines, val_lines = [], []
    for label in range(NUM_CLASSES):
        wnid = f'n{label:08d}'
        (root / 'train' / wnid).mkdir(parents=True)
        colour = rng.integers(0, 256, 3)
        for i in range(TRAIN_PER_CLASS + 1):
            noise = rng.integers(-40, 40, (IMG_SIZE, IMG_SIZE, 3))
            img = Image.fromarray(np.clip(colour + noise, 0, 255).astype(np.uint8))
            if i < TRAIN_PER_CLASS:
                rel = f'{wnid}/{wnid}_{i}.JPEG'
                img.save(root / 'train' / rel)
                train_lines.append(f'{rel} {label}')
            else:
                rel = f'ILSVRC2012_val_{label:08d}.JPEG'
                (root / 'val').mkdir(exist_ok=True)
                img.save(root / 'val' / rel)
                val_lines.append(f'{rel} {label}')
    (root / 'meta').mkdir()
    (root / 'meta' / 'train.txt').write_text('\n'.join(train_lines) + '\n')
    (root / 'meta' / 'val.txt').write_text('\n'.join(val_lines) + '\n')
    return str(root)


def _shrink(pipeline, size):
    """The same transforms with the crop and resize sizes scaled down to ``size``."""
    out = []
    for t in pipeline:
        t = dict(t)
        if t['type'] == 'RandomResizedCrop':
            t['scale'] = size
        elif t['type'] == 'ResizeEdge':
            t['scale'] = size * 8 // 7
        elif t['type'] == 'CenterCrop':
            t['crop_size'] = size
        out.append(t)
    return out


def tiny_config(name, data_root, work_dir):
    """A classification config as shipped, pointed at the tiny set: 5 classes, 64x64 crops,
    one epoch of two training iterations."""
    cfg = repo_config(osp.join(CONFIGS, name))
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg[key]
        loader.update(batch_size=TRAIN_BATCH, num_workers=0, persistent_workers=False)
        loader.dataset.data_root = data_root
        loader.dataset.pipeline = _shrink(loader.dataset.pipeline, IMG_SIZE)
    cfg.model.backbone.num_classes = NUM_CLASSES
    cfg.data_preprocessor.num_classes = NUM_CLASSES
    cfg.train_cfg = dict(by_epoch=True, max_epochs=1, val_interval=1)
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.checkpoint.save_best = None  # spares writing a second checkpoint
    cfg.randomness = dict(seed=0)
    cfg.work_dir = str(work_dir)
    return cfg


def _dump(cfg, path):
    """Write ``cfg`` for the tools. Each run's file gets its own name: MMEngine names a run's
    logger and visualizer after the config file and the second it starts, and reuses them
    when two runs share that name."""
    cfg.dump(str(path))
    return str(path)


def _scalars(work_dir):
    (path, ) = glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope='module')
def trained(imagenet_root, tmp_path_factory):
    """One epoch of CvT-13 and CMT-Ti through tools/train.py; the work dirs."""
    runs = {}
    for name in ('imagenet_cvt13_300e_in1k.py', 'imagenet_cmt_ti_800e_in1k.py'):
        work_dir = tmp_path_factory.mktemp(name[:-3])
        cfg = tiny_config(name, imagenet_root, work_dir)
        train_tool.main([_dump(cfg, work_dir / name)])
        runs[name] = str(work_dir)
    return runs


# ------------------------------------------------------------------------------------------
# The configs
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', sorted(CLS_CONFIGS))
def test_config_is_consistent(name):
    """Resolution, schedule and batch agree across the parts of each config."""
    cfg = repo_config(osp.join(CONFIGS, name))
    backbone_type, cmt_arch = CLS_CONFIGS[name]
    assert cfg.model.backbone.type == backbone_type
    assert cfg.model.backbone.out_type == 'logits' and cfg.model.head.type == 'ClsHead'
    assert cfg.custom_imports.imports == ['cvt_mm']
    train_types = [t['type'] for t in cfg.train_dataloader.dataset.pipeline]
    assert {'RandomResizedCrop', 'RandomFlip', 'RandAugment', 'RandomErasing'} <= set(train_types)
    assert [a['type'] for a in cfg.model.train_cfg.augments] == ['Mixup', 'CutMix']
    assert cfg.model.head.loss.type == 'LabelSmoothLoss'

    (crop, ) = [t['scale'] for t in cfg.train_dataloader.dataset.pipeline
                if t['type'] == 'RandomResizedCrop']
    (test_crop, ) = [t['crop_size'] for t in cfg.test_dataloader.dataset.pipeline
                     if t['type'] == 'CenterCrop']
    assert crop == test_crop
    if cmt_arch is not None:
        # CMT's relative position biases are stored for the ImageNet resolution of the arch.
        assert crop == CMT_ARCHS[cmt_arch]['pretrain_img_size']
    # The LR schedule covers the training epochs; CMT's official runs then train timm's 10
    # cool-down epochs at the minimum LR (docs/recipes.md, D5), CvT's stop at the cosine's end.
    warmup, cosine = cfg.param_scheduler
    cooldown = 10 if cmt_arch is not None else 0
    assert warmup['end'] == cosine['begin']
    assert cosine['end'] + cooldown == cfg.train_cfg.max_epochs
    assert cosine['T_max'] == cosine['end'] - cosine['begin']
    # auto_scale_lr refers to the official 8-GPU total batch that base_lr belongs to.
    assert cfg.auto_scale_lr.base_batch_size == 8 * cfg.train_dataloader.batch_size


@pytest.mark.parametrize('name', ['imagenet_cvt13_300e_in1k.py', 'imagenet_cmt_ti_800e_in1k.py'])
def test_weight_decay_groups(name):
    """Norms and biases (and CvT's cls token) get no weight decay; weights do; CMT's
    relative position biases are decayed as in the official run."""
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    cfg = repo_config(osp.join(CONFIGS, name))
    model = MODELS.build(cfg.model)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    decay_of = {}
    for group in optim_wrapper.optimizer.param_groups:
        for p in group['params']:
            decay_of[id(p)] = group['weight_decay']
    wd = cfg.optim_wrapper.optimizer.weight_decay
    for pname, p in model.named_parameters():
        if p.dim() == 1 or pname.endswith('cls_token'):
            assert decay_of[id(p)] == 0, pname
        else:
            assert decay_of[id(p)] == wd, pname
    if 'cmt' in name:
        assert any('relative_pos' in n for n, _ in model.named_parameters())


# ------------------------------------------------------------------------------------------
# Training and evaluation
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize('name', ['imagenet_cvt13_300e_in1k.py', 'imagenet_cmt_ti_800e_in1k.py'])
def test_train_full_pipeline_then_evaluate(trained, name):
    scalars = _scalars(trained[name])
    losses = [s['loss'] for s in scalars if 'loss' in s]
    assert len(losses) == math.ceil(NUM_CLASSES * TRAIN_PER_CLASS / TRAIN_BATCH)
    assert all(math.isfinite(v) and v > 0 for v in losses)
    (val, ) = [s for s in scalars if 'accuracy/top1' in s]
    assert 0 <= val['accuracy/top1'] <= 100
    assert val['accuracy/top5'] == 100  # 5 classes: the true one is always among the top 5

    ckpt = read_checkpoint(osp.join(trained[name], 'epoch_1.pth'))
    backbone_keys = [k for k in ckpt['state_dict'] if k.startswith('backbone.')]
    assert backbone_keys and len(backbone_keys) == len(ckpt['state_dict'])
    # The backbone's own classification stage was trained: its head is in the checkpoint.
    assert ckpt['state_dict']['backbone.head.weight'].shape[0] == NUM_CLASSES


def test_amp_flag_builds_amp_optim_wrapper(trained, imagenet_root, tmp_path):
    config = _dump(tiny_config('imagenet_cvt13_300e_in1k.py', imagenet_root, tmp_path),
                   tmp_path / 'amp_cvt13.py')
    if torch.cuda.is_available():
        train_tool.main([config, '--amp'])
        ckpt = read_checkpoint(str(tmp_path / 'epoch_1.pth'))
        # AmpOptimWrapper saves its loss scaler beside the optimizer state.
        assert 'loss_scaler' in ckpt['optimizer']
    else:
        # MMEngine builds AmpOptimWrapper only on an accelerator. Its check is the last step
        # before the first iteration: the runner, model and dataloaders were all built from
        # the --amp config by then.
        with pytest.raises(AssertionError, match='AmpOptimizerWrapper'):
            train_tool.main([config, '--amp'])
    # Without --amp the same config trains with the plain OptimWrapper.
    ckpt = read_checkpoint(osp.join(trained['imagenet_cvt13_300e_in1k.py'], 'epoch_1.pth'))
    assert 'loss_scaler' not in ckpt['optimizer']


# ------------------------------------------------------------------------------------------
# Pretrain -> detector / segmentor hand-over
# ------------------------------------------------------------------------------------------
def _dense_backbone(config, init_cfg, whole_model):
    """The backbone of a detection / segmentation config after ``init_weights``, built
    inside the whole detector / segmentor or on its own."""
    cfg = repo_config(osp.join(CONFIGS, config))
    init_default_scope(cfg.default_scope)
    if cfg.default_scope == 'mmdet':
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    cfg.model.backbone.init_cfg = init_cfg
    model = MODELS.build(cfg.model if whole_model else cfg.model.backbone)
    model.init_weights()
    return model.backbone if whole_model else model


@pytest.mark.parametrize('run,config,how', [
    # Through the whole detector / segmentor (its init_weights reaches the backbone's).
    ('imagenet_cvt13_300e_in1k.py', 'mask_rcnn_cvt13_coco.py', 'prefix'),
    ('imagenet_cvt13_300e_in1k.py', 'upernet_cvt13_ade20k.py', 'prefix'),
    # The configs' backbones on their own: the loader finds `backbone.` by itself, and the
    # file extracted by tools/model_converters/extract_backbone.py loads as it is.
    ('imagenet_cvt13_300e_in1k.py', 'mask_rcnn_cvt13_coco.py', 'direct'),
    ('imagenet_cvt13_300e_in1k.py', 'upernet_cvt13_ade20k.py', 'direct'),
    ('imagenet_cvt13_300e_in1k.py', 'upernet_cvt13_ade20k.py', 'extracted'),
    ('imagenet_cmt_ti_800e_in1k.py', 'mask_rcnn_cmt_ti_coco.py', 'direct'),
])
def test_pretrained_classifier_initialises_dense_model(trained, tmp_path, run, config, how):
    ckpt_path = osp.join(trained[run], 'epoch_1.pth')
    if how == 'prefix':
        init_cfg = dict(type='Pretrained', checkpoint=ckpt_path, prefix='backbone.')
    elif how == 'direct':
        init_cfg = dict(type='Pretrained', checkpoint=ckpt_path)
    else:
        clean = str(tmp_path / 'backbone.pth')
        extract_tool.main([ckpt_path, clean])
        init_cfg = dict(type='Pretrained', checkpoint=clean)
    backbone = _dense_backbone(config, init_cfg, whole_model=how == 'prefix')

    trained_sd = read_checkpoint(ckpt_path)['state_dict']
    dense_sd = backbone.state_dict()
    compared = 0
    for key, value in trained_sd.items():
        key = key[len('backbone.'):]
        if key.startswith('head.'):  # the dense configs have no ImageNet classifier
            assert key not in dense_sd
            continue
        assert torch.equal(dense_sd[key], value), key
        compared += 1
    assert compared == len(trained_sd) - 2  # all but head.weight / head.bias


def test_extract_backbone_writes_a_clean_checkpoint(trained, tmp_path):
    src = osp.join(trained['imagenet_cmt_ti_800e_in1k.py'], 'epoch_1.pth')
    summary = convert_checkpoint(src, str(tmp_path / 'cmt.pth'))
    assert summary['family'] == 'cmt' and summary['source_format'] == 'cmt-ours'
    out = torch.load(tmp_path / 'cmt.pth', weights_only=True)
    assert set(out) == {'state_dict', 'meta'}  # no optimizer, message hub or schedulers
    src_sd = read_checkpoint(src)['state_dict']
    assert set(out['state_dict']) == {k[len('backbone.'):] for k in src_sd}
    for key, value in out['state_dict'].items():
        assert torch.equal(value, src_sd['backbone.' + key])

    # safetensors output holds the same tensors.
    convert_checkpoint(src, str(tmp_path / 'cmt.safetensors'))
    st = read_checkpoint(str(tmp_path / 'cmt.safetensors'))
    assert all(torch.equal(st[k], v) for k, v in out['state_dict'].items())


def test_extract_backbone_rejects_bad_input(tmp_path):
    src = tmp_path / 'resnet.pth'
    torch.save({'state_dict': {'conv1.weight': torch.zeros(1)}}, src)
    with pytest.raises(CheckpointError,
                       match='cannot recognise the checkpoint as a cmt or cvt model'):
        convert_checkpoint(str(src), str(tmp_path / 'out.pth'))
    with pytest.raises(ValueError, match='must not overwrite'):
        convert_checkpoint(str(src), str(src))
    with pytest.raises(ValueError, match='--add-prefix must end with'):
        convert_checkpoint(str(src), str(tmp_path / 'out.pth'), add_prefix='backbone')
    with pytest.raises(CheckpointError, match='no key in the checkpoint starts with'):
        convert_checkpoint(str(src), str(tmp_path / 'out.pth'), prefix='backbone.')


# ------------------------------------------------------------------------------------------
# An official ImageNet checkpoint through the classification config and tools/test.py
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def official_cvt13(tmp_path_factory):
    """A CvT-13 state dict in the official microsoft/CvT layout (``stage{i}.`` keys, a plain
    dict as in the model zoo), with non-trivial BatchNorm statistics."""
    torch.manual_seed(0)
    model = CvT(arch='13', num_classes=NUM_CLASSES)
    model.init_weights()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    official = {re.sub(r'^stages\.(\d+)\.', r'stage\1.', k): v
                for k, v in model.state_dict().items()}
    path = tmp_path_factory.mktemp('official') / 'CvT-13-224x224-IN-1k.pth'
    torch.save(official, path)
    return str(path)


def test_official_checkpoint_evaluates_like_classify(official_cvt13, imagenet_root, tmp_path):
    from mmpretrain.registry import DATASETS, MODELS

    # tools/test.py loads the whole classifier, so the official file is first converted into
    # our layout under `backbone.`.
    clf_ckpt = str(tmp_path / 'cvt13_cls.pth')
    extract_tool.main([official_cvt13, clf_ckpt, '--add-prefix', 'backbone.'])
    cfg = tiny_config('imagenet_cvt13_300e_in1k.py', imagenet_root, tmp_path / 'work')
    preds_file = str(tmp_path / 'preds.pkl')
    test_tool.main([_dump(cfg, tmp_path / 'official_cvt13.py'), clf_ckpt, '--out', preds_file])

    # The reference: the backbone loading the official file itself, on the config's test
    # pipeline and data preprocessor.
    reference = CvT(arch='13', num_classes=NUM_CLASSES,
                    init_cfg=dict(type='Pretrained', checkpoint=official_cvt13))
    reference.init_weights()
    reference.eval()
    init_default_scope('mmpretrain')
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    preprocessor = MODELS.build(dict(type='ClsDataPreprocessor', **cfg.data_preprocessor))
    batch = preprocessor(pseudo_collate([dataset[i] for i in range(len(dataset))]), False)
    with torch.no_grad():
        expected = reference.classify(batch['inputs'])

        # The classifier of the config with the converted checkpoint: the same logits.
        classifier = MODELS.build(cfg.model)
        load_checkpoint(classifier, clf_ckpt, map_location='cpu')
        classifier.eval()
        logits = classifier(batch['inputs'], mode='tensor')
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)

    # tools/test.py saw the same scores and reports top-1 / top-5 accordingly.
    with open(preds_file, 'rb') as f:  # written by this test's own tools/test.py run
        preds = sorted(pickle.load(f), key=lambda p: p['sample_idx'])
    scores = torch.stack([p['pred_score'] for p in preds])
    torch.testing.assert_close(scores, expected.softmax(-1), rtol=1e-4, atol=1e-5)
    labels = torch.tensor(dataset.get_gt_labels())
    top1 = (expected.argmax(-1) == labels).float().mean().item() * 100
    metrics = None
    for path in glob.glob(osp.join(str(tmp_path / 'work'), '*', '*.json')):
        with open(path) as f:
            metrics = json.load(f)
    assert metrics is not None, 'tools/test.py wrote no metrics'
    assert math.isclose(metrics['accuracy/top1'], top1, abs_tol=1e-3)
    assert metrics['accuracy/top5'] == 100
