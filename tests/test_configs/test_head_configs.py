"""The Cascade Mask R-CNN, DINO, Mask2Former and Semantic FPN configs: every config's levels
and strides are the ones its head is built for (CvT ends at stride 16, so some heads get
synthetic levels: docs/detection_segmentation.md says which and why), and the 3x configs are
their 1x models on the 3x recipe, and what reads the backbone takes each size's widths. Each
head trains and evaluates through the tools on CvT-13 and CMT-S in test_every_model.py."""
import glob
import os.path as osp

import pytest
import torch
from mmengine.registry import init_default_scope

import cvt_mm  # noqa: F401
from cvt_mm.models import CMT, CvT

from helpers import (
    CONFIGS,
    repo_config,
)

HEADS = ('cascade_mask_rcnn', 'dino', 'mask2former', 'sem_fpn')
HEAD_CONFIGS = sorted(osp.basename(p) for p in glob.glob(osp.join(CONFIGS, '*.py'))
                      if osp.basename(p).startswith(HEADS))
# The real backbone levels of each family and the levels each head reads (backbone + neck).
BACKBONE_STRIDES = {'cvt': [4, 8, 16], 'cmt': [4, 8, 16, 32]}


NARROW_ARCHS = dict(cvt=dict(embed_dims=[16, 32, 64], num_heads=[1, 2, 4], depths=[1, 1, 1]),
                   cmt=dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 1, 2, 4],
                            depths=[1, 1, 1, 1]))


def expected_levels(name):
    """(strides the backbone returns, strides the head reads) for a config file name."""
    family = 'cvt' if '_cvt' in name else 'cmt'
    real = BACKBONE_STRIDES[family]
    if name.startswith('cascade_mask_rcnn'):
        return real, [4, 8, 16, 32, 64]
    if name.startswith('dino_4scale'):  # R-50's four scales: C3.. and synthetic levels
        return [s for s in real if s >= 8], [8, 16, 32, 64]
    if name.startswith('dino_5scale'):  # Swin-L's five: every stage and synthetic levels
        return real, [4, 8, 16, 32, 64]
    if name.startswith('mask2former'):
        return real, [4, 8, 16, 32]
    return real, real  # Semantic FPN: the real levels only, as UperNet


@pytest.mark.parametrize('name', HEAD_CONFIGS)
def test_what_reads_the_backbone_takes_its_widths(name):
    """The neck (or Mask2Former's head, which reads the stages) takes the widths of the stages
    the backbone returns, as the config's arch row gives them: what a size's config changes
    besides the arch (test_every_model.py trains CvT-13's and CMT-S's through the tools)."""
    model = repo_config(osp.join(CONFIGS, name)).model
    backbone = model.backbone
    arch = (CvT if backbone.type == 'CvT' else CMT).arch_zoo[backbone.arch]
    widths = [arch['embed_dims'][i] for i in backbone.out_indices]
    reader = model.get('neck') or model.get('panoptic_head') or model.decode_head
    assert list(reader.in_channels) == widths, (reader.type, reader.in_channels, widths)


def test_every_head_and_size_has_its_configs():
    for head in ('cascade_mask_rcnn_{}_coco.py', 'cascade_mask_rcnn_{}_ms-3x_coco.py',
                 'dino_4scale_{}_12e_coco.py', 'mask2former_{}_coco.py',
                 'mask2former_{}_ade20k.py', 'sem_fpn_{}_ade20k.py'):
        for size in ('cvt13', 'cvt21', 'cmt_s', 'cmt_b'):
            assert head.format(size) in HEAD_CONFIGS
    assert {'dino_5scale_cvt13_12e_coco.py', 'dino_5scale_cmt_s_12e_coco.py'} <= \
        set(HEAD_CONFIGS)


@pytest.mark.parametrize('name', HEAD_CONFIGS)
def test_levels_and_strides(name):
    """The backbone's and the neck's outputs on a 128 px image have the strides the head's
    settings name: RPN anchors and RoI extractors (Cascade), feature levels of deformable
    attention (DINO, Mask2Former's pixel decoder), FPNHead's feature strides."""
    cfg = repo_config(osp.join(CONFIGS, name))
    init_default_scope(cfg.default_scope)
    registry = __import__(f'{cfg.default_scope}.registry', fromlist=['MODELS']).MODELS
    model = cfg.model
    # The strides depend on the stages, not on their widths or depths: a narrow backbone of
    # the config's family (and its neck at those widths) shows them in a fraction of the time.
    family = 'cvt' if '_cvt' in name else 'cmt'
    backbone = registry.build(dict(model.backbone, init_cfg=None,
                                   arch=NARROW_ARCHS[family])).eval()
    neck = None
    if 'neck' in model:
        widths = [NARROW_ARCHS[family]['embed_dims'][i] for i in model.backbone.out_indices]
        assert len(model.neck.in_channels) == len(widths)
        neck = registry.build(dict(model.neck, in_channels=widths)).eval()
    size = 128
    with torch.no_grad():
        stages = backbone(torch.zeros(1, 3, size, size))
        levels = neck(stages) if neck is not None else stages
    real, read = expected_levels(name)
    assert [size // s.shape[-1] for s in stages] == real
    assert [size // f.shape[-1] for f in levels] == read
    if name.startswith('cascade_mask_rcnn'):
        assert model.rpn_head.anchor_generator.strides == read
        assert model.roi_head.bbox_roi_extractor.featmap_strides == read[:4]
        assert model.roi_head.mask_roi_extractor.featmap_strides == read[:4]
        if '_cvt' in name:  # P5 learned from C4 (not max-pooled from P4), as Mask R-CNN
            assert model.neck.add_extra_convs == 'on_input'
    elif name.startswith('dino'):
        assert model.get('num_feature_levels', 4) == len(read)  # DINO's default: 4
        assert model.encoder.layer_cfg.self_attn_cfg.num_levels == len(read)
        assert model.decoder.layer_cfg.cross_attn_cfg.num_levels == len(read)
    elif name.startswith('mask2former'):
        head = model.get('panoptic_head', model.get('decode_head'))
        assert head.strides == read
        # Deformable attention and the masked-attention decoder: the three coarsest levels.
        attn = head.pixel_decoder.encoder.layer_cfg.self_attn_cfg
        assert attn.num_levels == head.num_transformer_feat_level == 3
        assert read[-attn.num_levels:] == [8, 16, 32]
    else:
        assert model.decode_head.feature_strides == read
        assert len(model.decode_head.in_index) == len(read)


@pytest.mark.parametrize('name', ['dino_4scale_cvt13_12e_coco.py', 'mask2former_cvt13_coco.py',
                                  'mask2former_cmt_s_ade20k.py'])
def test_backbone_trains_at_a_tenth_of_the_lr_position_parameters_without_decay(name):
    """The recipes of DINO and Mask2Former: the backbone at 0.1x the LR, CvT's cls token and
    CMT's relative position biases at the backbone's LR without weight decay."""
    from mmengine.optim import build_optim_wrapper

    from helpers import build_model_from_config
    cfg = repo_config(osp.join(CONFIGS, name))
    model = build_model_from_config(cfg)
    optim = build_optim_wrapper(model, cfg.optim_wrapper).optimizer
    base_lr, base_decay = cfg.optim_wrapper.optimizer.lr, cfg.optim_wrapper.optimizer.weight_decay
    group_of = {id(p): g for g in optim.param_groups for p in g['params']}
    checked = 0
    for pname, param in model.named_parameters():
        if id(param) not in group_of:
            continue
        group = group_of[id(param)]
        if pname.startswith('backbone.'):
            assert group['lr'] == pytest.approx(0.1 * base_lr), pname
            if 'cls_token' in pname or 'relative_pos' in pname:
                assert group['weight_decay'] == 0, pname
                checked += 1
        elif pname.startswith(('encoder.', 'panoptic_head.transformer_decoder',
                               'decode_head.transformer_decoder')) and param.dim() == 2:
            assert group['lr'] == pytest.approx(base_lr), pname
    assert checked and base_decay > 0


MS_3X_CONFIGS = sorted(osp.basename(p) for p in glob.glob(osp.join(CONFIGS, '*_ms-3x_coco.py')))


@pytest.mark.parametrize('name', MS_3X_CONFIGS)
def test_a_3x_config_is_its_1x_sibling_with_the_3x_schedule_and_multi_scale_crops(name):
    """A ``*_ms-3x`` config trains the model of its 1x sibling (which the tool runs below
    and the detection tests train), so it is not trained again: its model is the sibling's
    and what differs resolves to the 3x recipe (36 epochs, steps after 27 and 33, the
    random-choice multi-scale resize or resize-crop-resize after a flip), test pipeline
    unchanged."""
    three, one = (repo_config(osp.join(CONFIGS, n)) for n in
                  (name, name.replace('_ms-3x', '')))
    assert three.model.to_dict() == one.model.to_dict()
    assert (three.train_cfg.max_epochs, one.train_cfg.max_epochs) == (36, 12)
    steps = [s for s in three.param_scheduler if s['type'] == 'MultiStepLR']
    assert [(s['milestones'], s['end']) for s in steps] == [([27, 33], 36)]
    assert three.optim_wrapper.to_dict() == one.optim_wrapper.to_dict()
    train = [t['type'] for t in three.train_dataloader.dataset.pipeline]
    assert train == ['LoadImageFromFile', 'LoadAnnotations', 'RandomFlip', 'RandomChoice',
                     'PackDetInputs']
    choice = three.train_dataloader.dataset.pipeline[3]['transforms']
    assert [[t['type'] for t in branch] for branch in choice] == [
        ['RandomChoiceResize'], ['RandomChoiceResize', 'RandomCrop', 'RandomChoiceResize']]
    assert [s[0] for s in choice[0][0]['scales']] == list(range(480, 801, 32))
    assert three.test_dataloader.to_dict() == one.test_dataloader.to_dict()
