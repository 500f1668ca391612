"""CvT backbone: architecture, options, toolbox builds and every checkpoint layout.

Small models (``TINY``) and small images keep this file CPU-cheap; the official variants are
only constructed on the meta device (parameter counts) or run once at 224x224.
"""
import importlib
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import cvt_mm  # noqa: F401  (registers CvT)
from cvt_mm.checkpoint import CheckpointError
from cvt_mm.models.cvt import CvT

from helpers import load_tool
from layouts import cvt_to_huggingface, cvt_to_official, randomized

TINY = dict(embed_dims=[16, 32, 48], num_heads=[1, 2, 3], depths=[1, 1, 2])


def tiny(**kwargs):
    kwargs.setdefault('arch', TINY)
    kwargs.setdefault('num_classes', 10)
    return CvT(**kwargs)


def conv_out(size, kernel, stride, pad):
    return (size + 2 * pad - kernel) // stride + 1


def stage_sizes(h, w):
    """Map sizes from the token-embedding convolutions (k7 s4 p2, k3 s2 p1, k3 s2 p1)."""
    sizes = []
    for k, s, p in ((7, 4, 2), (3, 2, 1), (3, 2, 1)):
        h, w = conv_out(h, k, s, p), conv_out(w, k, s, p)
        sizes.append((h, w))
    return sizes


# -------------------------------------------------------------------------------------------
# An independent functional re-statement of the official forward, on official-layout keys.
# -------------------------------------------------------------------------------------------
def _ln(x, sd, key):
    return F.layer_norm(x, x.shape[-1:], sd[key + '.weight'], sd[key + '.bias'], 1e-5)


def _linear(x, sd, key):
    return F.linear(x, sd[key + '.weight'], sd[key + '.bias'])


def _dw_bn(fmap, sd, key, stride):
    y = F.conv2d(fmap, sd[key + '.conv.weight'], stride=stride, padding=1, groups=fmap.shape[1])
    y = F.batch_norm(y, sd[key + '.bn.running_mean'], sd[key + '.bn.running_var'],
                     sd[key + '.bn.weight'], sd[key + '.bn.bias'], False, 0.0, 1e-5)
    return y.flatten(2).transpose(1, 2)


def official_classify(sd, x, num_heads):
    cls = None
    for i, (k, s, p) in enumerate(((7, 4, 2), (3, 2, 1), (3, 2, 1))):
        pre = f'stage{i}.'
        x = F.conv2d(x, sd[pre + 'patch_embed.proj.weight'], sd[pre + 'patch_embed.proj.bias'],
                     stride=s, padding=p)
        b, c, h, w = x.shape
        t = _ln(x.flatten(2).transpose(1, 2), sd, pre + 'patch_embed.norm')
        n_cls = 1 if pre + 'cls_token' in sd else 0
        if n_cls:
            t = torch.cat([sd[pre + 'cls_token'].expand(b, -1, -1), t], 1)
        j = 0
        while f'{pre}blocks.{j}.norm1.weight' in sd:
            blk = f'{pre}blocks.{j}.'
            y = _ln(t, sd, blk + 'norm1')
            fmap = y[:, n_cls:].transpose(1, 2).reshape(b, c, h, w)
            qkv = []
            for name, stride in (('q', 1), ('k', 2), ('v', 2)):
                z = _dw_bn(fmap, sd, f'{blk}attn.conv_proj_{name}', stride)
                z = _linear(torch.cat([y[:, :n_cls], z], 1), sd, f'{blk}attn.proj_{name}')
                qkv.append(z.reshape(b, z.shape[1], num_heads[i], -1).transpose(1, 2))
            q, kk, v = qkv
            attn = (torch.einsum('bhlk,bhtk->bhlt', q, kk) * c ** -0.5).softmax(-1)
            o = torch.einsum('bhlt,bhtv->bhlv', attn, v).transpose(1, 2).reshape(b, -1, c)
            t = t + _linear(o, sd, blk + 'attn.proj')
            y = _linear(_ln(t, sd, blk + 'norm2'), sd, blk + 'mlp.fc1')
            y = y * torch.sigmoid(1.702 * y)
            t = t + _linear(y, sd, blk + 'mlp.fc2')
            j += 1
        if n_cls:
            cls = t[:, :1]
        x = t[:, n_cls:].transpose(1, 2).reshape(b, c, h, w)
    return _linear(_ln(cls[:, 0], sd, 'norm'), sd, 'head')


def load_via_init_cfg(path, **kwargs):
    model = tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path), **kwargs))
    model.init_weights()
    return model.eval()


@pytest.fixture(scope='module')
def source():
    """A randomised tiny model, an input and its official outputs."""
    model = randomized(tiny())
    x = torch.randn(2, 3, 64, 80, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model, x, model.classify(x), model(x)


# -------------------------------------------------------------------------------------------
# Architecture
# -------------------------------------------------------------------------------------------
def test_matches_independent_official_forward(source):
    model, x, logits, _ = source
    with torch.no_grad():
        expected = official_classify(cvt_to_official(model.state_dict()), x, TINY['num_heads'])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('size,batch', [((97, 131), 1), ((320, 480), 2), ((32, 45), 1)])
def test_output_shapes_and_strides(size, batch):
    model = tiny().eval()
    with torch.no_grad():
        outs = model(torch.randn(batch, 3, *size))
    assert len(outs) == 3
    for (h, w), channels, stride, out in zip(stage_sizes(*size), TINY['embed_dims'],
                                             (4, 8, 16), outs):
        assert out.shape == (batch, channels, h, w)
        # Padding 2 around a 7-wide kernel: maps are within one pixel of size / stride.
        assert abs(h - size[0] / stride) < 1 and abs(w - size[1] / stride) < 1
    assert model.out_channels == TINY['embed_dims']


def test_cvt13_at_224_has_the_official_stage_shapes():
    model = CvT(arch='13').eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, 64, 56, 56), (1, 192, 28, 28),
                                              (1, 384, 14, 14)]
    assert model.head.out_features == 1000


def test_a_stage_continues_from_its_token_embedding():
    """``forward_tokens`` runs a stage after its token embedding (for a caller that keeps the
    embedded map): on what ``patch_embed`` gives, the stage's own output, the cls-token stage
    included."""
    model = tiny().eval()
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        inputs = [x] + model.forward_intermediates(x, intermediates_only=True)[:-1]
        for stage, stage_input in zip(model.stages, inputs):
            tokens, hw = stage(stage_input)
            split_tokens, split_hw = stage.forward_tokens(*stage.patch_embed(stage_input))
            assert torch.equal(split_tokens, tokens) and split_hw == hw
    assert tokens.shape[1] == 1 + hw[0] * hw[1]  # the last stage's cls token


@pytest.mark.parametrize('arch,millions', [('13', 19.997), ('21', 31.623), ('w24', 277.196)])
def test_parameter_counts_match_the_official_models(arch, millions):
    with torch.device('meta'):
        model = CvT(arch=arch)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 3) == millions


def test_drop_path_follows_the_official_recipe():
    with torch.device('meta'):
        model = CvT(arch='13')  # drop_path_rate=0.1: 0 / 0 / 0.1, linear within the stage
        per_stage = CvT(arch=TINY, drop_path_rate=[0.2, 0.0, 0.4])

    def rates(m, stage):
        return [getattr(b.drop_path, 'drop_prob', 0.0) for b in m.stages[stage].blocks]

    assert rates(model, 0) == [0.0] and rates(model, 1) == [0.0, 0.0]
    assert rates(model, 2) == pytest.approx([0.1 * j / 9 for j in range(10)])
    assert rates(per_stage, 0) == [0.0] and rates(per_stage, 2) == pytest.approx([0.0, 0.4])


def test_out_indices_order_and_out_norms(source):
    model, x, _, stage_maps = source
    picked = tiny(out_indices=(2, 0))
    picked.load_state_dict(model.state_dict())
    with_norms = tiny(out_indices=(2, 0), out_norm_cfg=dict(type='LN'))
    with_norms.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        plain = picked.eval()(x)
        normed = with_norms.eval()(x)
    assert picked.out_channels == [48, 16]
    torch.testing.assert_close(plain[0], stage_maps[2])
    torch.testing.assert_close(plain[1], stage_maps[0])
    # A fresh LayerNorm per output: every position's channel vector is standardised.
    for out in normed:
        torch.testing.assert_close(out.mean(1), torch.zeros_like(out.mean(1)), atol=1e-5,
                                   rtol=0)
        torch.testing.assert_close(out.var(1, unbiased=False), torch.ones_like(out.mean(1)),
                                   atol=1e-3, rtol=0)


def test_sdpa_and_reference_attention_agree(source):
    model, x, logits, maps = source
    reference = tiny(fast_paths=False)
    reference.load_state_dict(model.state_dict())
    with torch.no_grad():
        ref_maps = reference.eval()(x)
        ref_logits = reference.classify(x)
    for a, b in zip(maps, ref_maps):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)


def test_logits_output_type_and_headless_classify(source):
    model, x, logits, _ = source
    as_classifier = tiny(out_type='logits')
    as_classifier.load_state_dict(model.state_dict())
    with torch.no_grad():
        (out, ) = as_classifier.eval()(x)
    torch.testing.assert_close(out, logits)
    assert as_classifier.out_channels == [10]

    headless = tiny(num_classes=0)
    missing = headless.load_state_dict(model.state_dict(), strict=False)
    assert sorted(missing.unexpected_keys) == ['head.bias', 'head.weight']
    with torch.no_grad():
        feats = headless.eval().classify(x)
    assert feats.shape == (2, 48)
    torch.testing.assert_close(feats @ model.head.weight.T + model.head.bias, logits,
                               rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------------------------------
# Training options
# -------------------------------------------------------------------------------------------
def _bn_stats(module):
    return {k: v.clone() for k, v in module.state_dict().items() if 'running' in k}


def test_frozen_stages_zero_freezes_only_the_stem():
    model = tiny(frozen_stages=0).train()
    assert not any(p.requires_grad for p in model.stages[0].patch_embed.parameters())
    assert not model.stages[0].patch_embed.training
    assert all(p.requires_grad for p in model.stages[0].blocks.parameters())
    assert all(p.requires_grad for s in model.stages[1:] for p in s.parameters())


def test_frozen_stages():
    model = tiny(frozen_stages=2, out_norm_cfg=dict(type='LN'))
    model.train()
    for i, stage in enumerate(model.stages):
        assert all(p.requires_grad == (i == 2) for p in stage.parameters())
        assert all(m.training == (i == 2) for m in stage.modules())
    assert not any(p.requires_grad for p in model.out_norms['1'].parameters())
    assert all(p.requires_grad for p in model.out_norms['2'].parameters())
    before = [_bn_stats(s) for s in model.stages]
    sum(o.sum() for o in model(torch.randn(2, 3, 64, 64))).backward()
    after = [_bn_stats(s) for s in model.stages]
    for i in range(3):
        changed = any(not torch.equal(before[i][k], after[i][k]) for k in before[i])
        assert changed == (i == 2), f'stage {i}'
    assert all(p.grad is None for p in model.stages[0].parameters())


def test_norm_eval_keeps_batchnorm_statistics():
    model = tiny(norm_eval=True).train()
    before = _bn_stats(model)
    model(torch.randn(2, 3, 64, 64))
    assert all(torch.equal(before[k], v) for k, v in _bn_stats(model).items())
    assert model.stages[0].patch_embed.norm.training  # only BatchNorm is affected
    # Nothing is frozen by it (the classification stage is frozen in featmap mode anyway).
    assert all(p.requires_grad for n, p in model.named_parameters()
               if not n.startswith(('norm.', 'head.')))


def _saved_tensor_count(model, x):
    count = 0

    def pack(t):
        nonlocal count
        count += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = model(x)
    return count, outs


def test_with_cp_same_outputs_and_gradients_with_less_saved():
    plain = tiny(drop_path_rate=0.3).train()
    checkpointed = tiny(drop_path_rate=0.3, with_cp=True).train()
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 64)
    results = []
    for model in (plain, checkpointed):
        torch.manual_seed(0)  # same drop-path draws in both runs
        saved, outs = _saved_tensor_count(model, x)
        sum((o * o).mean() for o in outs).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((saved, outs, grads))
    (saved_a, outs_a, grads_a), (saved_b, outs_b, grads_b) = results
    for a, b in zip(outs_a, outs_b):
        torch.testing.assert_close(a, b)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 0
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], msg=name)
    assert saved_b < saved_a / 2


# -------------------------------------------------------------------------------------------
# Building in each toolbox
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize('registry_module', ['mmdet.registry', 'mmseg.registry',
                                             'mmpretrain.registry'])
def test_builds_from_a_config_in_each_toolbox(registry_module):
    registry = importlib.import_module(registry_module).MODELS
    model = registry.build(dict(type='CvT', arch=TINY, out_indices=(0, 1, 2),
                                out_norm_cfg=dict(type='LN'), num_classes=0))
    assert isinstance(model, CvT)
    with torch.no_grad():
        outs = model.eval()(torch.randn(1, 3, 64, 96))
    assert [o.shape[1] for o in outs] == TINY['embed_dims']


def test_mmpretrain_image_classifier_trains_the_classification_stage(tmp_path, source):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    model, x, logits, _ = source
    path = tmp_path / 'ours.pth'
    torch.save(model.state_dict(), path)
    # Whatever scope an earlier test left current (MMEngine builds in the current scope's
    # registry, so mmseg's would not know ImageClassifier).
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = MODELS.build(dict(
            type='ImageClassifier', neck=None,
            backbone=dict(type='CvT', arch=TINY, num_classes=10, out_type='logits',
                          init_cfg=dict(type='Pretrained', checkpoint=str(path))),
            head=dict(type='ClsHead', loss=dict(type='CrossEntropyLoss'))))
    classifier.init_weights()  # the classifier's init reaches the backbone's loader
    classifier.eval()
    with torch.no_grad():
        torch.testing.assert_close(classifier(x, mode='tensor'), logits)
    classifier.train()
    samples = [DataSample().set_gt_label(3), DataSample().set_gt_label(7)]
    losses = classifier(x, samples, mode='loss')
    losses['loss'].backward()
    assert torch.isfinite(losses['loss'])
    assert classifier.backbone.head.weight.grad.abs().sum() > 0


# -------------------------------------------------------------------------------------------
# Checkpoint layouts
# -------------------------------------------------------------------------------------------
def _assert_reproduces(path, source, **init_kwargs):
    model, x, logits, maps = source
    loaded = load_via_init_cfg(path, **init_kwargs)
    with torch.no_grad():
        torch.testing.assert_close(loaded.classify(x), logits, rtol=0, atol=0)
        for a, b in zip(loaded(x), maps):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    return loaded


def test_loads_the_official_layout(tmp_path, source):
    path = tmp_path / 'CvT-13-224x224-IN-1k.pth'
    torch.save(cvt_to_official(source[0].state_dict()), path)
    _assert_reproduces(path, source)


@pytest.mark.parametrize('filename', ['model.safetensors', 'pytorch_model.bin'])
def test_loads_the_huggingface_layout(tmp_path, source, filename):
    hf = cvt_to_huggingface(source[0].state_dict())
    # num_batches_tracked is not a weight HF keeps in every export; loading must not need it.
    hf = {k: v for k, v in hf.items() if not k.endswith('num_batches_tracked')}
    path = tmp_path / filename
    if filename.endswith('.safetensors'):
        save_file(hf, str(path))
    else:
        torch.save(hf, path)
    _assert_reproduces(path, source)


def test_loads_ours_bare_and_inside_an_mmengine_checkpoint(tmp_path, source):
    sd = source[0].state_dict()
    torch.save(sd, tmp_path / 'bare.pth')
    _assert_reproduces(tmp_path / 'bare.pth', source)
    wrapped = {'meta': {'epoch': 3, 'mmengine_version': '0.10.7'},
               'state_dict': {**{'backbone.' + k: v for k, v in sd.items()},
                              'neck.fc.weight': torch.zeros(2, 2)}}
    torch.save(wrapped, tmp_path / 'detector.pth')
    _assert_reproduces(tmp_path / 'detector.pth', source)
    _assert_reproduces(tmp_path / 'detector.pth', source, prefix='backbone.')


def test_missing_and_unused_keys_are_an_error_unless_partial_loading_is_asked_for(
        tmp_path, source):
    from mmengine.logging import MMLogger
    sd = dict(source[0].state_dict())
    del sd['stages.1.blocks.0.mlp.fc2.bias']
    sd['stages.1.blocks.0.extra.weight'] = torch.zeros(1)
    torch.save(sd, tmp_path / 'partial.pth')
    with pytest.raises(CheckpointError, match=r'does not fit the model: 1 model parameters not '
                       r'in the file: stages\.1\.blocks\.0\.mlp\.fc2\.bias; 1 keys of the file '
                       r'the model lacks: stages\.1\.blocks\.0\.extra\.weight.*allow_partial'):
        load_via_init_cfg(tmp_path / 'partial.pth')
    log_file = tmp_path / 'load.log'
    MMLogger.get_instance('test_cvt_missing_keys', log_file=str(log_file),
                          log_level=logging.INFO)
    load_via_init_cfg(tmp_path / 'partial.pth', allow_partial=True)
    text = log_file.read_text()
    assert 'stages.1.blocks.0.mlp.fc2.bias' in text and 'Missing' in text
    assert 'stages.1.blocks.0.extra.weight' in text and 'Unused' in text


def _official_file(model, path):
    torch.save({k.replace('stages.', 'stage', 1): v for k, v in model.state_dict().items()},
               path)
    return path


@pytest.mark.parametrize('src, dst', [('13', '21'), ('21', '13')])
def test_weights_of_another_arch_name_both_archs(tmp_path, src, dst):
    """CvT-13 weights in a CvT-21 (or back) used to log 'Missing keys (248)' and train on with
    random blocks."""
    path = _official_file(CvT(src), tmp_path / f'CvT-{src}-224x224-IN-1k.pth')
    model = CvT(dst, num_classes=0, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(CheckpointError, match=f'looks like CvT-{src}; the model is CvT-{dst}'):
        model.init_weights()
    partial = CvT(dst, num_classes=0, init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                                    allow_partial=True))
    partial.init_weights()  # on purpose: what fits is loaded
    same = 'stages.1.blocks.0.mlp.fc1.weight'
    loaded = torch.load(path, weights_only=True)['stage1.blocks.0.mlp.fc1.weight']
    assert torch.equal(partial.state_dict()[same], loaded)


def test_a_different_head_is_skipped_with_a_warning(tmp_path, source):
    model, x, _, maps = source
    torch.save(model.state_dict(), tmp_path / 'ten_classes.pth')
    five = tiny(num_classes=5, init_cfg=dict(type='Pretrained',
                                             checkpoint=str(tmp_path / 'ten_classes.pth')))
    head_before = five.head.weight.clone()
    five.init_weights()
    assert torch.equal(five.head.weight, head_before)
    with torch.no_grad():
        for a, b in zip(five.eval()(x), maps):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_shape_mismatch_names_the_key_and_both_shapes(tmp_path):
    other = dict(TINY, embed_dims=[16, 32, 96])
    torch.save(tiny(arch=other).state_dict(), tmp_path / 'wider.pth')
    with pytest.raises(CheckpointError, match=r'stages\.2\.patch_embed\.proj\.weight: '
                       r'checkpoint \(96, 32, 3, 3\) vs model \(48, 32, 3, 3\)'):
        load_via_init_cfg(tmp_path / 'wider.pth')


def test_missing_unreadable_and_unknown_files(tmp_path):
    missing = tmp_path / 'CvT-13-224x224-IN-1k.pth'
    with pytest.raises(CheckpointError, match='not found') as err:
        load_via_init_cfg(missing)
    message = str(err.value)
    assert str(missing) in message and '1drv.ms' in message and 'convert_weights.py' in message
    with pytest.raises(CheckpointError, match='microsoft/cvt-13'):
        load_via_init_cfg(tmp_path / 'model.safetensors')

    garbage = tmp_path / 'garbage.pth'
    garbage.write_bytes(b'not a checkpoint')
    with pytest.raises(CheckpointError, match=re.escape(str(garbage))):
        load_via_init_cfg(garbage)

    torch.save({'fc.weight': torch.zeros(1)}, tmp_path / 'resnet.pth')
    with pytest.raises(CheckpointError, match='cvt-official.*cvt-huggingface.*cvt-ours'):
        load_via_init_cfg(tmp_path / 'resnet.pth')


def test_converter_writes_our_layout(tmp_path, source, capsys):
    converter = load_tool('model_converters/convert_weights')
    save_file(cvt_to_huggingface(source[0].state_dict()), str(tmp_path / 'model.safetensors'))
    torch.save(cvt_to_official(source[0].state_dict()), tmp_path / 'official.pth')
    for name, fmt in (('model.safetensors', 'cvt-huggingface'), ('official.pth', 'cvt-official')):
        dst = tmp_path / 'out' / (name + '.converted.pth')
        assert converter.main([str(tmp_path / name), str(dst), '--family', 'cvt']) == 0
        saved = torch.load(dst, weights_only=True)
        assert saved['meta']['source_format'] == fmt
        assert set(saved['state_dict']) == set(source[0].state_dict())
        _assert_reproduces(dst, source)
    assert converter.main([str(tmp_path / 'nope.pth'), str(tmp_path / 'x.pth'),
                           '--family', 'cvt']) == 1
    assert 'nope.pth' in capsys.readouterr().err


# -------------------------------------------------------------------------------------------
# Bad arguments and inputs
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize('kwargs,match', [
    (dict(arch='17'), r"'13', '21', 'w24'"),
    (dict(arch=dict(embed_dims=[16, 32, 48], num_heads=[1, 2, 3])), 'depths'),
    (dict(arch=dict(TINY, num_heads=[1, 2, 5])), 'not divisible'),
    (dict(arch=dict(TINY, depths=[1, 1])), '3 positive ints'),
    (dict(out_indices=(0, 3)), r'0\.\.2'),
    (dict(out_indices=()), r'out_indices is empty; name at least one of the stages 0\.\.2'),
    (dict(out_type='maps'), "'featmap', 'logits'"),
    (dict(out_type='logits', num_classes=0), 'num_classes must be > 0'),
    (dict(num_classes=-1), 'num_classes'),
    (dict(frozen_stages=4), r'-1\.\.3'),
    (dict(drop_path_rate=[0.1, 0.2]), 'per-stage'),
    (dict(drop_path_rate=1.5), r'\[0, 1\)'),
    (dict(out_norm_cfg=dict(type='BN')), "'LN'"),
    (dict(init_cfg=dict(type='Pretrained')), 'checkpoint=PATH'),
])
def test_bad_options_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kwargs)


@pytest.mark.parametrize('shape,match', [((3, 64, 64), r'\(B, C, H, W\)'),
                                         ((1, 1, 64, 64), 'in_channels=3'),
                                         ((1, 3, 31, 64), 'at least 32x32'),
                                         ((0, 3, 64, 64), r'empty batch \(0 images\)')])
def test_bad_inputs_raise_value_error(shape, match):
    model = tiny()
    with pytest.raises(ValueError, match=match):
        model(torch.randn(*shape))
    with pytest.raises(ValueError, match=match):
        model.classify(torch.randn(*shape))


def test_training_minimum_for_a_batch_of_one_is_checked():
    """BatchNorm needs two values per channel: batch 1 at 32x32 leaves the last stage's
    key/value map 1x1. The message says so and what works; eval and norm_eval are fine."""
    model = tiny().train()
    with pytest.raises(ValueError, match=r"batch of 1 at this size: stage 2's key/value map is "
                                         r'1x1.*at least 2, inputs of at least 35 pixels'):
        model(torch.randn(1, 3, 32, 32))
    model(torch.randn(1, 3, 35, 32))  # the stated minimum works
    model(torch.randn(2, 3, 32, 32))  # so does a second image
    tiny(norm_eval=True).train()(torch.randn(1, 3, 32, 32))
    tiny(out_indices=(0, 1)).train()(torch.randn(1, 3, 32, 32))  # stage 2 does not run
    model.eval()(torch.randn(1, 3, 32, 32))
