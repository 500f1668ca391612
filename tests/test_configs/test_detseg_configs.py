"""Every detection/segmentation config in configs/ builds its real model and predicts on a
small image; the pyramid the heads see has the strides the configs promise."""
import copy
import functools
import glob
import os.path as osp

import pytest
import torch
from mmengine.registry import init_default_scope

import cvt_mm  # noqa: F401

from helpers import CONFIGS, repo_config


@functools.lru_cache(maxsize=None)
def _parsed(path):
    return repo_config(path)


def load(path):
    return copy.deepcopy(_parsed(path))


ALL_CONFIGS = sorted(glob.glob(osp.join(CONFIGS, '**', '*.py'), recursive=True))
# Classification configs (default_scope='mmpretrain') are covered by the classification tests.
DETSEG_CONFIGS = [path for path in ALL_CONFIGS
                  if _parsed(path).get('default_scope') in ('mmdet', 'mmseg')]
# Models that several tests inspect are built once.
_SHARED_MODELS = {}
SHARED = {osp.join(CONFIGS, name) for name in (
    'mask_rcnn_cvt13_coco.py', 'mask_rcnn_cmt_s_coco.py', 'upernet_cvt13_ade20k.py',
    'upernet_cmt_s_ade20k.py', 'retinanet_cvt13_coco.py', 'retinanet_cmt_s_coco.py')}


def config_id(path):
    return osp.relpath(path, CONFIGS)


def build_model(path):
    """The config's real model with PyTorch's default init (no checkpoints in CI; the
    pretrained init and MMEngine's init_weights are exercised by the training tests)."""
    if path in _SHARED_MODELS:
        return _SHARED_MODELS[path]
    cfg = load(path)
    init_default_scope(cfg.default_scope)
    cfg.model.backbone.init_cfg = None
    if 'rpn' in cfg.model.get('test_cfg', {}):
        # A 64x96 picture needs no 1 000 proposals: Cascade R-CNN's three 4-conv box heads
        # would spend 20 s on them.
        cfg.model.test_cfg.rpn.max_per_img = 100
    if cfg.model.type == 'DINO':
        # DINO picks its 900 queries among the encoder's tokens: 128 at 64x96 (4 scales).
        cfg.model.num_queries = 100
    if cfg.default_scope == 'mmdet':
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    model = MODELS.build(cfg.model).eval()
    if path in SHARED:
        _SHARED_MODELS[path] = model
    return model


def test_glob_finds_every_dense_config():
    names = {config_id(path) for path in DETSEG_CONFIGS}
    expected = {'mask_rcnn_cvt13_coco.py', 'mask_rcnn_cvt21_coco.py',
                'mask_rcnn_cvt13_ms-3x_coco.py', 'mask_rcnn_cmt_s_ms-3x_coco.py',
                'upernet_cvt13_ade20k.py', 'upernet_cvt21_ade20k.py',
                'upernet_cmt_s_ade20k.py', 'upernet_cmt_b_ade20k.py',
                'demo/mask_rcnn_cvt13_demo.py', 'demo/upernet_cvt13_demo.py'}
    expected |= {f'mask_rcnn_cmt_{size}_coco.py' for size in ('ti', 'xs', 's', 'b')}
    expected |= {'retinanet_cvt13_coco.py', 'retinanet_cmt_s_coco.py'}
    assert expected <= names


@pytest.mark.parametrize('path', DETSEG_CONFIGS, ids=config_id)
def test_config_builds_and_predicts(path):
    cfg = load(path)
    # MMSegmentation's Mask2Former also imports MMDetection's models, which its head uses.
    assert cfg.custom_imports['imports'] in (['cvt_mm'], ['mmdet.models', 'cvt_mm'])
    model = build_model(path)
    # The neck/head widths written in the config must match what the backbone emits.
    channels = model.backbone.out_channels
    if 'neck' in cfg.model:
        assert list(cfg.model.neck.in_channels) == channels
    else:  # Mask2Former on a four-stage backbone: its head reads the stages
        head = cfg.model.get('panoptic_head', cfg.model.get('decode_head'))
        assert list(head.in_channels) == channels
    if cfg.default_scope == 'mmseg' and 'in_index' in cfg.model.decode_head:
        head = cfg.model.decode_head
        widths = model.neck.out_channels if 'neck' in cfg.model else channels
        widths = [widths] * len(channels) if isinstance(widths, int) else widths
        assert [widths[i] for i in head.in_index] == list(head.in_channels)
    if 'auxiliary_head' in cfg.model:
        aux = cfg.model.auxiliary_head
        assert channels[aux.in_index] == aux.in_channels

    height, width = 64, 96
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8)
    meta = dict(img_shape=(height, width), ori_shape=(height, width), scale_factor=(1., 1.))
    if cfg.default_scope == 'mmdet':
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=meta)]
    else:
        from mmseg.structures import SegDataSample
        samples = [SegDataSample(metainfo=meta)]
    with torch.no_grad():
        data = model.data_preprocessor(dict(inputs=[image], data_samples=samples), False)
        result = model(**data, mode='predict')[0]
    if cfg.default_scope == 'mmdet':
        pred = result.pred_instances
        assert pred.bboxes.shape[1] == 4 and len(pred.bboxes) == len(pred.scores)
        if 'roi_head' in cfg.model or 'panoptic_head' in cfg.model:  # instance masks
            assert pred.masks.shape[1:] == (height, width)
    else:
        seg = result.pred_sem_seg.data
        assert seg.shape == (1, height, width)
        assert int(seg.max()) < cfg.model.decode_head.num_classes


def test_cvt_mask_rcnn_sees_mmdetections_standard_five_levels():
    """CvT's three stages (strides 4/8/16) become FPN levels at strides 4..64, so the RPN
    anchors and the RoI extractors keep MMDetection's standard strides."""
    model = build_model(osp.join(CONFIGS, 'mask_rcnn_cvt13_coco.py'))
    size = 256
    with torch.no_grad():
        stages = model.backbone(torch.zeros(1, 3, size, size))
        levels = model.neck(stages)
    assert [size // s.shape[-1] for s in stages] == [4, 8, 16]
    assert [size // level.shape[-1] for level in levels] == [4, 8, 16, 32, 64]
    assert model.rpn_head.prior_generator.strides == [(s, s) for s in (4, 8, 16, 32, 64)]
    assert model.roi_head.bbox_roi_extractor.featmap_strides == [4, 8, 16, 32]
    assert model.roi_head.mask_roi_extractor.featmap_strides == [4, 8, 16, 32]
    # P5 is learned from C4 (not max-pooled from P4): a stride-2 conv on the 384-ch input.
    extra = model.neck.fpn_convs[3].conv
    assert extra.in_channels == 384 and extra.stride == (2, 2)


@pytest.mark.parametrize('name, backbone_strides', [('retinanet_cvt13_coco.py', [8, 16]),
                                                    ('retinanet_cmt_s_coco.py', [8, 16, 32])])
def test_retinanet_sees_its_standard_p3_to_p7(name, backbone_strides):
    """RetinaNet's five levels at strides 8..128 whatever the backbone's depth: C3.. from the
    backbone (stage 0 not returned, so no unused output norm), the rest from extra convs on the
    last backbone map ('on_input'), as MMDetection's RetinaNet base."""
    cfg = load(osp.join(CONFIGS, name))
    model = build_model(osp.join(CONFIGS, name))
    size = 128
    with torch.no_grad():
        stages = model.backbone(torch.zeros(1, 3, size, size))
        levels = model.neck(stages)
    assert [size // s.shape[-1] for s in stages] == backbone_strides
    assert [size // level.shape[-1] for level in levels] == [8, 16, 32, 64, 128]
    assert model.bbox_head.prior_generator.strides == [(s, s) for s in (8, 16, 32, 64, 128)]
    assert cfg.model.neck.add_extra_convs == 'on_input'
    assert set(model.backbone.out_norms) == {str(i) for i in cfg.model.backbone.out_indices}


def _unscoped(value):
    """A config value without the `_scope_` keys inheriting from `mmdet::` files adds."""
    if isinstance(value, dict):
        return {k: _unscoped(v) for k, v in value.items() if k != '_scope_'}
    if isinstance(value, (list, tuple)):
        return [_unscoped(v) for v in value]
    return value


@pytest.mark.parametrize('name', ['retinanet_cvt13_coco.py', 'retinanet_cmt_s_coco.py'])
def test_retinanet_is_mmdetections_1x_config_with_our_backbone_and_schedule(name):
    """Everything but the backbone, the FPN inputs and the training recipe with its training
    guards (shared with the Mask R-CNN configs through _base_/schedules/adamw_1x.py, but for
    PVT's RetinaNet weight decay: docs/recipes.md, D3) is MMDetection's RetinaNet 1x."""
    from helpers import load_config
    ours, theirs = load(osp.join(CONFIGS, name)), load_config(
        'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py')
    mask_rcnn = load(osp.join(CONFIGS, 'mask_rcnn_cvt13_coco.py'))
    schedule = ('optim_wrapper', 'param_scheduler', 'train_cfg', 'auto_scale_lr', 'runner_type',
                'custom_hooks', 'training_guards')
    mask_rcnn.optim_wrapper.optimizer.weight_decay = 1e-4
    for key in schedule:
        assert ours[key] == mask_rcnn[key], key
    assert ours.optim_wrapper.optimizer.type == 'AdamW' and ours.train_cfg.max_epochs == 12
    assert ours.param_scheduler[1].milestones == [8, 11]
    differ = {'model', 'custom_imports', 'pretrained', 'max_epochs', *schedule,
              'cvt13_backbone', 'cmt_s_backbone'}  # our backbone bases' settings
    assert set(ours) - differ == set(theirs) - differ
    for key in set(ours) - differ:
        assert _unscoped(ours[key]) == _unscoped(theirs[key]), key
    for key in set(ours.model) - {'backbone', 'neck', '_scope_'}:
        assert _unscoped(ours.model[key]) == _unscoped(theirs.model[key]), key
    ignored = ('in_channels', 'start_level', 'relu_before_extra_convs', '_scope_')
    assert {k: v for k, v in ours.model.neck.items() if k not in ignored} == \
        {k: v for k, v in theirs.model.neck.items() if k not in ignored}
    assert ours.model.backbone.norm_eval is True
    assert ours.model.backbone.init_cfg.checkpoint.startswith('checkpoints/')


@pytest.mark.parametrize('name, strides', [('upernet_cvt13_ade20k.py', [4, 8, 16]),
                                           ('upernet_cmt_s_ade20k.py', [4, 8, 16, 32])])
def test_upernet_inputs(name, strides):
    """UperNet reads every backbone level; its pyramid pooling runs on the coarsest one (the
    stride-16 map for CvT) and the auxiliary head on the stride-16 map."""
    cfg = load(osp.join(CONFIGS, name))
    model = build_model(osp.join(CONFIGS, name))
    size = 128
    with torch.no_grad():
        feats = model.extract_feat(torch.zeros(1, 3, size, size))
    head_inputs = model.decode_head._transform_inputs(feats)
    assert [size // f.shape[-1] for f in head_inputs] == strides
    assert size // feats[cfg.model.auxiliary_head.in_index].shape[-1] == 16
    assert model.decode_head.psp_modules.pool_scales == (1, 2, 3, 6)


@pytest.mark.parametrize('name', ['mask_rcnn_cvt13_coco.py', 'mask_rcnn_cmt_s_coco.py',
                                  'upernet_cvt13_ade20k.py', 'upernet_cmt_s_ade20k.py',
                                  'retinanet_cvt13_coco.py', 'retinanet_cmt_s_coco.py'])
def test_no_weight_decay_on_norms_cls_token_and_position_biases(name):
    from mmengine.optim import build_optim_wrapper
    cfg = load(osp.join(CONFIGS, name))
    model = build_model(osp.join(CONFIGS, name))
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    decay = {}
    for group in wrapper.optimizer.param_groups:
        for param in group['params']:
            decay[id(param)] = group['weight_decay']
    base_decay = cfg.optim_wrapper.optimizer.weight_decay
    no_decay = [n for n, p in model.named_parameters()
                if 'cls_token' in n or 'relative_pos' in n]
    assert no_decay, 'expected a cls token (CvT) or relative position biases (CMT)'
    norms = [n for n, m in model.named_modules()
             if isinstance(m, (torch.nn.LayerNorm, torch.nn.modules.batchnorm._BatchNorm))]
    assert norms
    for name_, param in model.named_parameters():
        if not param.requires_grad:  # frozen (the classification stage): no optimizer group
            assert id(param) not in decay, name_
            continue
        module = name_.rsplit('.', 1)[0]
        if name_ in no_decay or module in norms:
            assert decay[id(param)] == 0, name_
    conv_weights = [p for n, p in model.backbone.named_parameters()
                    if p.dim() == 4 and 'relative_pos' not in n and p.requires_grad]
    assert all(decay[id(p)] == base_decay for p in conv_weights)


@pytest.mark.parametrize('name', ['mask_rcnn_cvt13_coco.py', 'upernet_cmt_s_ade20k.py'])
def test_missing_pretrained_file_says_what_and_where(name, tmp_path, monkeypatch):
    """Without checkpoints/ the run stops with one message naming the file, where to download
    it and how to convert it."""
    from mmengine.registry import MODELS

    from cvt_mm.checkpoint import CheckpointError
    monkeypatch.chdir(tmp_path)  # the configs' checkpoints/ paths are relative
    cfg = load(osp.join(CONFIGS, name))
    backbone = MODELS.build(cfg.model.backbone)
    with pytest.raises(CheckpointError) as err:
        backbone.init_weights()
    message = str(err.value)
    assert cfg.model.backbone.init_cfg.checkpoint in message
    assert 'https://' in message and 'convert_weights.py' in message
