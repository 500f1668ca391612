"""CvT and CMT trained through the other ecosystems' own code, on data the tests make (loss
falls, weights change): MMPretrain's ``TIMMBackbone`` with ``cmt_s`` in an MMDetection config
through ``tools/train.py``; transformers' UperNet, Mask2Former and RT-DETR each with our CvT-13
and CMT-S backbones, and UperNet over transformers' ``TimmBackbone`` with ``cvt_13``;
segmentation_models_pytorch's ``Unet('tu-cmt_s')``. The named archs at small inputs, from random
weights, on one fixed batch (what any model can fit in a few steps)."""
import glob
import json
import os.path as osp

import pytest
import segmentation_models_pytorch as smp
import torch
from transformers import (
    Mask2FormerConfig,
    Mask2FormerForUniversalSegmentation,
    RTDetrConfig,
    RTDetrForObjectDetection,
    TimmBackboneConfig,
    UperNetConfig,
    UperNetForSemanticSegmentation,
)

import cvt_mm  # noqa: F401  (registers the timm models and the Hugging Face backbones)
from cvt_mm.models.huggingface import CMTConfig, CvTConfig

from helpers import det_user_config, run_tool, write_checkpoint

# End-to-end runs of the real tools and models: left out by `make test-fast`.
pytestmark = pytest.mark.slow

STEPS = 4


def losses_of(path: str) -> list:
    """Every iteration's total loss from a run's scalars.json."""
    (scalars, ) = glob.glob(osp.join(path, '*', 'vis_data', 'scalars.json'))
    return [json.loads(line)['loss'] for line in open(scalars) if '"loss"' in line]


def test_mmdetection_trains_mmpretrain_timm_backbone_of_cmt_s(tiny_data, tmp_path):
    """``type='mmpretrain.TIMMBackbone', model_name='cmt_s', features_only=True``: MMPretrain
    builds it with timm.create_model, which finds cmt_s because the config imports cvt_mm."""
    user = det_user_config(str(tmp_path / 'user.py'), 'retinanet_cmt_s_coco.py',
                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'), max_epochs=4)
    config = tmp_path / 'timm_backbone.py'
    config.write_text(f'''_base_ = {user!r}
custom_imports = dict(imports=['cvt_mm', 'mmpretrain.models'], allow_failed_imports=False)
model = dict(backbone=dict(_delete_=True, type='mmpretrain.TIMMBackbone', model_name='cmt_s',
                           features_only=True, pretrained=False, out_indices=(1, 2, 3)))
optim_wrapper = dict(optimizer=dict(lr=1e-3))
randomness = dict(seed=0)
''')
    start = write_checkpoint(str(config), str(tmp_path / 'start.pth'))
    run_tool(['train.py', str(config), '--cfg-options', f'load_from={start}'], timeout=900)
    losses = losses_of(str(tmp_path / 'work'))
    assert len(losses) == 8 and losses[-1] < losses[0], losses
    before = torch.load(start, weights_only=False)['state_dict']
    after = torch.load(tmp_path / 'work' / 'epoch_4.pth', weights_only=False)['state_dict']
    backbone = [k for k in after if k.startswith('backbone.timm_model.model.stages.')]
    assert 'backbone.timm_model.model.stages.3.relative_pos' in backbone
    assert all(not torch.equal(before[k], after[k]) for k in backbone
               if k.endswith(('weight', 'relative_pos')))


def train(model, step, steps: int = STEPS, lr: float = 1e-3) -> list:
    """``steps`` AdamW steps of ``step()`` (the loss of the fixed batch); the losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        loss = step()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def weights(module) -> dict:
    """The trainable parameters (RT-DETR, for one, freezes its backbone's BatchNorms)."""
    return {k: v.detach().clone() for k, v in module.named_parameters() if v.requires_grad}


def assert_learned(losses: list, before: dict, module) -> None:
    assert losses[-1] < losses[0], losses
    after = weights(module)
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert len(before) > 100 and unchanged == [], unchanged[:5]


BATCH = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))


def _upernet(backbone_config, channels) -> UperNetForSemanticSegmentation:
    return UperNetForSemanticSegmentation(UperNetConfig(
        backbone_config=backbone_config, num_labels=4, hidden_size=64, pool_scales=[1, 2],
        auxiliary_in_channels=channels))


# Each head with CvT-13 (strides 4, 8, 16) and CMT-S (4 ... 32) through their configs; CMT's
# biases stored for 64 px inputs.
BACKBONES = {
    'cvt_13': lambda **kw: CvTConfig.from_arch('13', **kw),
    'cmt_s': lambda **kw: CMTConfig.from_arch('s', pretrain_img_size=64, **kw),
}
STRIDES = {'cvt_13': [4, 8, 16], 'cmt_s': [8, 16, 32]}


@pytest.mark.parametrize('backbone', ['cvt_13', 'cmt_s', 'timm_cvt_13'])
def test_transformers_upernet_trains(backbone):
    torch.manual_seed(0)
    if backbone == 'timm_cvt_13':  # transformers' TimmBackbone over our timm model
        config = TimmBackboneConfig(backbone='cvt_13', out_indices=(0, 1, 2))
    else:
        config = BACKBONES[backbone](out_features=['stage1', 'stage2', 'stage3'] + (
            ['stage4'] if backbone == 'cmt_s' else []))
    model = _upernet(config, 384 if 'cvt' in backbone else 256)
    assert type(model.backbone).__name__ == ('TimmBackbone' if 'timm' in backbone
                                             else f'{backbone[:3].upper()}Backbone'
                                             .replace('CVT', 'CvT'))
    labels = torch.randint(0, 4, (2, 64, 64), generator=torch.Generator().manual_seed(1))
    before = weights(model.backbone)
    losses = train(model, lambda: model(pixel_values=BATCH, labels=labels).loss)
    assert_learned(losses, before, model.backbone)


@pytest.mark.parametrize('backbone', sorted(BACKBONES))
def test_transformers_mask2former_trains(backbone):
    torch.manual_seed(0)
    # Mask2Former's pixel decoder: the first map for the masks, the others multi-scale.
    outputs = ['stem', 'stage1', 'stage2', 'stage3'] if backbone == 'cvt_13' else [
        'stage1', 'stage2', 'stage3', 'stage4']
    model = Mask2FormerForUniversalSegmentation(Mask2FormerConfig(
        backbone_config=BACKBONES[backbone](out_features=outputs),
        num_labels=3, num_queries=8, hidden_dim=64, mask_feature_size=64, feature_size=64,
        encoder_layers=1, decoder_layers=3, encoder_feedforward_dim=128, dim_feedforward=128,
        num_attention_heads=4, train_num_points=256))
    gen = torch.Generator().manual_seed(1)
    masks = [(torch.rand(2, 64, 64, generator=gen) > 0.5).float() for _ in range(2)]
    classes = [torch.tensor([0, 2]), torch.tensor([1, 2])]
    before = weights(model.model.pixel_level_module.encoder)
    losses = train(model, lambda: model(pixel_values=BATCH, mask_labels=masks,
                                        class_labels=classes).loss)
    assert_learned(losses, before, model.model.pixel_level_module.encoder)


@pytest.mark.parametrize('backbone', sorted(BACKBONES))
def test_transformers_rt_detr_trains(backbone):
    torch.manual_seed(0)
    config = BACKBONES[backbone](out_features=['stage1', 'stage2', 'stage3'] if backbone ==
                                 'cvt_13' else ['stage2', 'stage3', 'stage4'])
    model = RTDetrForObjectDetection(RTDetrConfig(
        backbone_config=config, encoder_in_channels=config.stage_channels()[-3:],
        feat_strides=STRIDES[backbone], num_labels=3, d_model=64,
        encoder_hidden_dim=64, decoder_in_channels=[64, 64, 64], num_queries=20,
        decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_denoising=0,
        encode_proj_layers=[2]))
    labels = [dict(class_labels=torch.tensor([1, 2]),
                   boxes=torch.tensor([[0.3, 0.3, 0.2, 0.3], [0.7, 0.6, 0.3, 0.2]])),
              dict(class_labels=torch.tensor([0]), boxes=torch.tensor([[0.5, 0.5, 0.4, 0.4]]))]
    backbone = model.model.backbone
    before = weights(backbone)
    losses = train(model, lambda: model(pixel_values=BATCH, labels=labels).loss)
    assert_learned(losses, before, backbone)


def test_segmentation_models_pytorch_unet_trains_with_tu_cmt_s():
    torch.manual_seed(0)
    model = smp.Unet('tu-cmt_s', encoder_weights=None, classes=3)
    target = torch.randint(0, 3, (2, 64, 64), generator=torch.Generator().manual_seed(1))
    before = weights(model.encoder)
    losses = train(model, lambda: torch.nn.functional.cross_entropy(model(BATCH), target))
    assert_learned(losses, before, model.encoder)
