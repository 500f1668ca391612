"""Layer-wise learning-rate decay: backbone depths in MMPretrain's convention, the
constructor for detectors/segmentors, and MMPretrain's own constructor on our backbones."""
import os.path as osp

import pytest
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

import cvt_mm  # noqa: F401
from cvt_mm.models.cmt import CMT
from cvt_mm.models.cvt import CvT

from helpers import ROOT, build_model_from_config, repo_config


@pytest.mark.parametrize('model,depths', [(CvT(arch='13'), [1, 2, 10]),
                                          (CMT(arch='ti'), [2, 2, 10, 2])])
def test_depths_follow_blocks_from_stem_to_head(model, depths):
    num_layers = sum(depths) + 2
    seen = {}
    for name, _ in model.named_parameters():
        depth, total = model.get_layer_depth('backbone.' + name, 'backbone.')
        assert total == num_layers and 0 <= depth < num_layers, name
        seen[name] = depth
    last = 0
    for s, d in enumerate(depths):
        for j in range(d):
            depth = next(v for k, v in seen.items() if k.startswith(f'stages.{s}.blocks.{j}.'))
            assert depth == 1 + sum(depths[:s]) + j == last + 1
            last = depth
    assert seen['stages.0.patch_embed.proj.weight'] == 0
    assert seen['stages.1.patch_embed.proj.weight'] == depths[0]  # with stage 0's last block
    assert seen['head.weight'] == num_layers - 1
    if isinstance(model, CMT):
        assert seen['stem.0.conv.weight'] == 0
        assert seen['stages.2.relative_pos'] == 1 + sum(depths[:2])
    # Necks and heads of a detector are outside the prefix: the top, full LR.
    assert model.get_layer_depth('neck.lateral_convs.0.conv.weight', 'backbone.') == \
        (num_layers - 1, num_layers)


def param_groups(config):
    cfg = repo_config(osp.join(ROOT, config)) if isinstance(config, str) else config
    model = build_model_from_config(cfg)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    return model, cfg, {g['param_name']: g for g in wrapper.optimizer.param_groups}


def test_detector_config_decays_backbone_lr_by_depth():
    model, cfg, groups = param_groups('configs/mask_rcnn_cvt13_layer-decay_coco.py')
    base_lr = cfg.optim_wrapper.optimizer.lr
    rate = cfg.optim_wrapper.paramwise_cfg.layer_decay_rate
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(groups) == trainable
    for name, group in groups.items():
        depth, top = model.backbone.get_layer_depth(name, 'backbone.')
        assert group['lr'] == pytest.approx(base_lr * rate ** (top - 1 - depth)), name
    first = next(g for n, g in groups.items() if n.startswith('backbone.stages.0.blocks.0.'))
    assert first['lr'] == pytest.approx(base_lr * rate ** 13)  # CvT-13: 15 layers, block 0 is 1
    assert groups['neck.lateral_convs.0.conv.weight']['lr'] == base_lr
    # The base config's weight-decay rules still hold.
    assert groups['backbone.stages.2.cls_token']['weight_decay'] == 0
    norm = next(n for n in groups if n.startswith('backbone.') and '.norm' in n)
    assert groups[norm]['weight_decay'] == 0


def test_segmentor_with_cmt_and_a_clear_error_without_depths():
    cfg = repo_config(osp.join(ROOT, 'configs/upernet_cmt_s_ade20k.py'))
    cfg.optim_wrapper.constructor = 'BackboneLayerDecayOptimWrapperConstructor'
    cfg.optim_wrapper.paramwise_cfg = dict(layer_decay_rate=0.8)
    model, _, groups = param_groups(cfg)
    lrs = {n: g['lr'] for n, g in groups.items()}
    assert lrs['backbone.stem.0.conv.weight'] < lrs['backbone.stages.3.blocks.1.lpu.weight'] \
        < lrs['decode_head.conv_seg.weight']
    cfg.model.backbone = dict(type='mmseg.ResNetV1c', depth=18)
    with pytest.raises(ValueError, match='ResNetV1c has none'):
        param_groups(cfg)


def test_mmpretrain_constructor_works_on_our_classifiers():
    cfg = repo_config(osp.join(ROOT, 'configs/imagenet_cmt_ti_800e_in1k.py'))
    cfg.optim_wrapper.constructor = 'LearningRateDecayOptimWrapperConstructor'
    cfg.optim_wrapper.paramwise_cfg = dict(layer_decay_rate=0.75)
    model, _, groups = param_groups(cfg)
    assert groups['backbone.stem.0.conv.weight']['lr'] < groups['backbone.head.weight']['lr']
