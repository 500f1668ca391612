"""What CvT and CMT share through ``PyramidBackbone`` behaves the same in both: argument
checks, the head without classes, init_cfg forms, initialisation bookkeeping and when
activation checkpointing runs."""
import pytest
import torch
from mmengine.model import BaseModule
from torch import nn

import cvt_mm  # noqa: F401
from cvt_mm.models import CMT, CMTModel, CvT, CvTModel
from cvt_mm.models.backbone import PyramidBackbone

SMALL = {
    CvT: dict(arch=dict(embed_dims=[16, 32, 48], num_heads=[1, 2, 3], depths=[1, 1, 1])),
    CMT: dict(arch=dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8],
                        depths=[1, 1, 1, 1], stem_channels=8, fc_channels=32),
              pretrain_img_size=64),
}
BACKBONES = pytest.mark.parametrize('cls', [CvT, CMT], ids=['cvt', 'cmt'])


def build(cls, **kwargs):
    return cls(**{**SMALL[cls], **kwargs})


@BACKBONES
def test_both_are_their_model_with_the_openmmlab_conventions(cls):
    model_cls = {CvT: CvTModel, CMT: CMTModel}[cls]
    assert cls.__mro__[1:3] == (PyramidBackbone, model_cls) and cls.family in ('cvt', 'cmt')
    # The same modules: a model's weights load into the backbone without renaming.
    model = model_cls(**SMALL[cls])
    backbone = build(cls)
    assert backbone.load_state_dict(model.state_dict(), strict=True)


@BACKBONES
@pytest.mark.parametrize('kwargs,match', [
    (dict(in_channels=0), 'in_channels must be a positive int'),
    (dict(in_channels='3'), 'in_channels must be a positive int'),
    (dict(out_norm_cfg=dict(type='BN')), r"out_norm_cfg\['type'\]='BN' is not supported; "
                                         "allowed: 'LN'"),
    (dict(norm_eval='yes'), 'norm_eval must be True or False'),
    (dict(with_cp=1), 'with_cp must be True or False'),
    (dict(num_classes=-1), 'num_classes must be an int >= 0'),
    (dict(init_cfg='checkpoints/x.pth'), 'init_cfg must be None, a dict or a list of dicts'),
    (dict(init_cfg=[dict(type='Pretrained', checkpoint='x.pth')]), 'as a single dict'),
    (dict(init_cfg=dict(type='Pretrained')), 'needs checkpoint=PATH'),
])
def test_the_same_bad_options_raise_the_same_errors(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build(cls, **kwargs)


@BACKBONES
def test_without_classes_the_head_is_identity_and_classify_returns_features(cls):
    model = build(cls, num_classes=0).eval()
    assert isinstance(model.head, nn.Identity)
    feats = model.classify(torch.randn(1, 3, 64, 64))
    assert feats.dim() == 2 and feats.shape[0] == 1


@BACKBONES
def test_a_list_init_cfg_is_applied_and_init_runs_once(cls):
    model = build(cls, init_cfg=[dict(type='Constant', layer='Linear', val=0.25, bias=0.)])
    model.init_weights()
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(torch.all(m.weight == 0.25) for m in linears)
    assert model.is_init

    official = build(cls)
    official.init_weights()
    assert official.is_init  # a parent's init_weights() leaves it alone from now on
    before = {k: v.clone() for k, v in official.state_dict().items()}
    class Parent(BaseModule):
        def __init__(self, backbone):
            super().__init__()
            self.backbone = backbone

    Parent(official).init_weights()
    assert all(torch.equal(before[k], v) for k, v in official.state_dict().items())


@BACKBONES
def test_activation_checkpointing_runs_only_when_a_backward_can_follow(cls, checkpoint_calls):
    model = build(cls, with_cp=True)
    x = torch.randn(2, 3, 64, 64)
    model.train()(x)
    trained = len(checkpoint_calls)
    assert trained == sum(len(stage.blocks) for stage in model.stages)
    with torch.no_grad():
        model.train()(x)
    model.eval()(x)
    assert len(checkpoint_calls) == trained  # no recomputation without a backward to serve
