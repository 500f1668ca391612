"""CMT backbone: sizes, relative-position bias resizing, checkpoints, training modes, errors.

Most tests use a tiny CMT (a few thousand parameters, one block per stage) so the whole file
runs in seconds on CPU.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import cvt_mm  # noqa: F401  (registers CMT)
from benchmarks.measure import held_for_backward
from cvt_mm.checkpoint import CheckpointError
from cvt_mm.models.cmt import CMT
from cvt_mm.models.matrix_resize import resize_relative_pos

from helpers import load_tool
from layouts import cmt_official_key

convert_weights = load_tool('model_converters/convert_weights')

TINY = dict(embed_dims=[8, 16, 32, 64], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
            stem_channels=8, fc_channels=32, mlp_ratio=2.0)
STRIDES = (4, 8, 16, 32)


def tiny(**kwargs):
    kwargs.setdefault('num_classes', 5)
    kwargs.setdefault('drop_path_rate', 0.0)
    kwargs.setdefault('pretrain_img_size', 64)
    model = CMT(arch=TINY, **kwargs)
    model.init_weights()
    return model


def randomize_bn(model):
    """Non-trivial running statistics, so eval-mode outputs depend on every BN buffer."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model


# ------------------------------------------------------------------------------ architecture
@pytest.mark.parametrize('arch,millions', [('ti', 9.492), ('xs', 15.247), ('s', 26.256),
                                           ('b', 45.715)])
def test_official_parameter_counts(arch, millions):
    model = CMT(arch=arch, num_classes=1000)
    count = sum(p.numel() for p in model.parameters())
    assert round(count / 1e6, 3) == millions


def test_default_init_keeps_activations_bounded():
    """The official conv init (fan_out over all output channels, also for depth-wise convs)
    keeps CMT-Ti's 16 residual blocks from amplifying the input at initialisation."""
    torch.manual_seed(0)
    model = CMT(arch='ti', drop_path_rate=0.0)
    model.init_weights()
    with torch.no_grad():
        outs = model.eval()(torch.randn(1, 3, 64, 64))
    assert max(o.abs().max().item() for o in outs) < 100


@pytest.mark.parametrize('size', [(160, 160), (224, 224), (97, 131), (320, 480)])
def test_pyramid_shapes_at_any_size(size):
    model = tiny().eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    assert len(outs) == 4
    for fmap, stride, channels in zip(outs, STRIDES, TINY['embed_dims']):
        # The documented rule: ceil(H / stride) x ceil(W / stride) at every level.
        assert fmap.shape == (1, channels, math.ceil(size[0] / stride),
                              math.ceil(size[1] / stride))
    assert model.out_channels == TINY['embed_dims']


def test_odd_size_levels_halve_for_fpn():
    model = tiny().eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 97, 131))
    assert [tuple(o.shape[-2:]) for o in outs] == [(25, 33), (13, 17), (7, 9), (4, 5)]


def test_keys_cover_a_map_not_divisible_by_sr_ratio():
    """Stage 0 at 97x131 has 25x33 tokens and sr_ratio 8: the reduction pads to 32x40, so the
    last row and column of tokens are among the keys (a floor would drop them)."""
    model = randomize_bn(tiny()).eval()
    stage = model.stages[0]
    attn = stage.blocks[0].attn
    hw, key_grid = (25, 33), (4, 5)
    bias = stage.relative_pos_for(hw, key_grid)
    x = torch.randn(1, 25 * 33, TINY['embed_dims'][0])
    x2 = x.clone()
    x2[:, -1] += 3.0  # token (24, 32) only
    with torch.no_grad():
        y, y2 = attn(x, hw, bias), attn(x2, hw, bias)
    assert not torch.allclose(y[:, 0], y2[:, 0])


def test_out_indices_order_and_out_norm():
    model = tiny(out_indices=(3, 1), out_norm_cfg=dict(type='LN')).eval()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, 64, 96))
    assert [o.shape[1] for o in outs] == [64, 16] == model.out_channels
    # A LayerNorm per output: every token is normalised over channels.
    tokens = outs[0].flatten(2)
    assert torch.allclose(tokens.mean(1), torch.zeros_like(tokens.mean(1)), atol=1e-5)


def test_sdpa_matches_reference_attention():
    torch.manual_seed(0)
    fast = randomize_bn(tiny()).eval()
    ref = tiny(fast_paths=False).eval()
    ref.load_state_dict(fast.state_dict())
    x = torch.randn(2, 3, 97, 131)
    with torch.no_grad():
        for a, b in zip(fast(x), ref(x)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(fast.classify(x), ref.classify(x), atol=1e-5, rtol=1e-4)


def test_classification_head_kept_and_dropped():
    model = tiny(num_classes=7).eval()
    x = torch.randn(2, 3, 64, 64)
    assert model.classify(x).shape == (2, 7)
    logits_model = tiny(num_classes=7, out_type='logits').eval()
    logits_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        (logits, ) = logits_model(x)
        torch.testing.assert_close(logits, model.classify(x))
    headless = tiny(num_classes=0).eval()
    assert not any(k.startswith('head.') for k in headless.state_dict())
    assert headless.classify(x).shape == (2, TINY['fc_channels'])


# ------------------------------------------------------------------------------ bias resizing
def test_bias_is_the_stored_parameter_at_the_stored_size():
    model = tiny(pretrain_img_size=(64, 96))
    for stage in model.stages:
        assert stage.relative_pos_for(stage.query_grid, stage.key_grid) is stage.relative_pos
    bias = torch.randn(2, 12, 6)
    assert resize_relative_pos(bias, (3, 4), (2, 3), (3, 4), (2, 3)) is bias


def _sample(fn, query_grid, key_grid):
    """fn at pixel centres (align_corners=False convention), as a (1, Nq, Nk) bias."""
    def centres(n):
        return (torch.arange(n, dtype=torch.float64) + 0.5) / n
    yq, xq, yk, xk = torch.meshgrid(centres(query_grid[0]), centres(query_grid[1]),
                                    centres(key_grid[0]), centres(key_grid[1]), indexing='ij')
    return fn(yq, xq, yk, xk).reshape(1, query_grid[0] * query_grid[1], -1)


def test_bias_resizing_is_smooth():
    def smooth(yq, xq, yk, xk):
        return torch.sin(math.pi * yq) * torch.cos(math.pi * xk) + 0.5 * xq * yk

    src_q, src_k, dst_q, dst_k = (16, 16), (8, 8), (24, 20), (12, 10)
    stored = _sample(smooth, src_q, src_k)
    truth = _sample(smooth, dst_q, dst_k)
    resized = resize_relative_pos(stored, src_q, src_k, dst_q, dst_k)
    assert resized.shape == truth.shape
    err = (resized - truth).abs()
    # Nearest-neighbour resizing as the yardstick of a non-smooth result.
    nearest = stored.reshape(1, 16, 16, 8, 8).permute(0, 3, 4, 1, 2).reshape(1, 64, 16, 16)
    nearest = F.interpolate(nearest, size=dst_q, mode='nearest').reshape(1, 8, 8, -1)
    nearest = F.interpolate(nearest.permute(0, 3, 1, 2), size=dst_k, mode='nearest')
    nearest = nearest.reshape(1, -1, 120)
    nearest_err = (nearest - truth).abs()
    assert err.mean() < 0.3 * nearest_err.mean()
    assert err.max() < 0.1
    # A constant bias stays constant.
    const = torch.full((3, 256, 64), 0.7)
    torch.testing.assert_close(resize_relative_pos(const, src_q, src_k, dst_q, dst_k),
                               torch.full((3, 480, 120), 0.7))


def _interpolate_twice(bias, src_q, src_k, dst_q, dst_k):
    """The resize as F.interpolate's bicubic, one grid at a time (how the official code and
    this project's earlier version computed it)."""
    heads, nq, nk = bias.shape
    x = bias.transpose(1, 2).reshape(heads * nk, 1, *src_q)
    x = F.interpolate(x, size=dst_q, mode='bicubic', align_corners=False)
    x = x.reshape(heads, nk, -1).transpose(1, 2)
    x = x.reshape(-1, 1, *src_k)
    x = F.interpolate(x, size=dst_k, mode='bicubic', align_corners=False)
    return x.reshape(heads, dst_q[0] * dst_q[1], -1)


@pytest.mark.parametrize('grids', [((16, 16), (8, 8), (24, 20), (12, 10)),  # up
                                   ((5, 7), (3, 2), (3, 4), (6, 5)),  # down and up
                                   ((4, 4), (2, 2), (4, 4), (3, 3)),  # keys only
                                   ((4, 4), (2, 2), (6, 3), (2, 2))])  # queries only
def test_bias_resizing_is_f_interpolate_bicubic_with_its_gradient(grids):
    """The matrix-product resize is the same linear map as F.interpolate's: values and
    gradients agree to float64 rounding."""
    src_q, src_k, dst_q, dst_k = grids
    gen = torch.Generator().manual_seed(0)
    bias = torch.randn(3, src_q[0] * src_q[1], src_k[0] * src_k[1], generator=gen,
                       dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(3, dst_q[0] * dst_q[1], dst_k[0] * dst_k[1], generator=gen,
                           dtype=torch.float64)
    ours = resize_relative_pos(bias, *grids)
    reference = _interpolate_twice(bias, *grids)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)
    (grad_ours, ), (grad_ref, ) = (torch.autograd.grad(t, bias, grad_out)
                                   for t in (ours, reference))
    torch.testing.assert_close(grad_ours, grad_ref, rtol=0, atol=1e-12)


def test_bias_cache_eval_only_and_invalidated():
    model = tiny().eval()
    stage = model.stages[1]
    grids = ((5, 7), (2, 2))
    with torch.no_grad():
        first = stage.relative_pos_for(*grids)
        assert stage.relative_pos_for(*grids) is first  # cached
        model.load_state_dict({**model.state_dict(),
                               'stages.1.relative_pos': stage.relative_pos + 1.0})
        updated = stage.relative_pos_for(*grids)
    assert updated is not first
    torch.testing.assert_close(updated, first + 1.0)
    model.train()
    assert not stage.position_bias.cached_grids
    resized = stage.relative_pos_for(*grids)
    assert stage.relative_pos_for(*grids) is not resized  # no caching while training
    resized.sum().backward()
    assert stage.relative_pos.grad is not None and stage.relative_pos.grad.abs().sum() > 0


def test_bias_cache_is_bounded():
    stage = tiny(bias_cache_size=2).eval().stages[0]
    with torch.no_grad():
        for width in (5, 6, 7):
            stage.relative_pos_for((4, width), (1, 1))
    # The oldest dropped.
    assert stage.position_bias.cached_grids == [((4, 6), (1, 1)), ((4, 7), (1, 1))]


# ------------------------------------------------------------------------------ checkpoints
def test_official_layout_round_trips(tmp_path):
    src = randomize_bn(tiny())
    official = {cmt_official_key(k): v.clone() for k, v in src.state_dict().items()}
    # Spot-check names against the official list.
    for key in ('stem_conv1.weight', 'stem_norm3.running_var', 'patch_embed_d.norm.bias',
                'relative_pos_c', 'blocks_a.0.proj.weight', 'blocks_a.0.attn.sr.0.weight',
                'blocks_b.0.attn.sr.1.running_mean', 'blocks_c.0.mlp.conv1.2.weight',
                'blocks_d.0.mlp.proj_bn.bias', 'blocks_d.0.mlp.conv2.1.weight',
                'blocks_d.0.attn.q.bias', '_fc.weight', '_bn.running_mean', 'head.weight'):
        assert key in official
    assert 'blocks_d.0.attn.sr.0.weight' not in official  # sr_ratio 1: no reduction
    path = tmp_path / 'cmt_official.pth'
    torch.save({'model': official}, path)
    loaded = tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    converted = tmp_path / 'cmt_ours.pth'
    assert convert_weights.main([str(path), str(converted), '--family', 'cmt']) == 0
    reloaded = tiny(init_cfg=dict(type='Pretrained', checkpoint=str(converted)))
    for key, value in src.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
        assert torch.equal(reloaded.state_dict()[key], value), key
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval().classify(x), src.eval().classify(x))


def official_logits(sd, x, depths, num_heads, sr_ratios):
    """The official CMT forward restated functionally on official keys (from the paper and
    the key list: stem conv-GELU-BN x3; per stage k2/s2 conv + LN(1e-5); blocks of
    LPU, LN(1e-6) + LMHSA with relative_pos, LN(1e-6) + IRFFN; conv-BN-Swish, pool, head)."""
    def bn(t, p):
        return F.batch_norm(t, sd[p + '.running_mean'], sd[p + '.running_var'],
                            sd[p + '.weight'], sd[p + '.bias'], False, 0.0, 1e-5)

    def conv(t, p, **kw):
        return F.conv2d(t, sd[p + '.weight'], sd[p + '.bias'], **kw)

    def ln(t, p, eps):
        return F.layer_norm(t, t.shape[-1:], sd[p + '.weight'], sd[p + '.bias'], eps)

    def lin(t, p):
        return F.linear(t, sd[p + '.weight'], sd[p + '.bias'])

    def split(t, h):
        return t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2)

    for n in (1, 2, 3):
        x = bn(F.gelu(conv(x, f'stem_conv{n}', stride=2 if n == 1 else 1, padding=1)),
               f'stem_norm{n}')
    for i, letter in enumerate('abcd'):
        x = conv(x, f'patch_embed_{letter}.proj', stride=2)
        b, c, h, w = x.shape
        tokens = ln(x.flatten(2).transpose(1, 2), f'patch_embed_{letter}.norm', 1e-5)
        for j in range(depths[i]):
            p = f'blocks_{letter}.{j}.'
            fmap = tokens.transpose(1, 2).reshape(b, c, h, w)
            tokens = (conv(fmap, p + 'proj', padding=1, groups=c) + fmap).flatten(2)
            tokens = tokens.transpose(1, 2)
            a = ln(tokens, p + 'norm1', 1e-6)
            kv = a
            if sr_ratios[i] > 1:
                red = conv(a.transpose(1, 2).reshape(b, c, h, w), p + 'attn.sr.0',
                           stride=sr_ratios[i], groups=c)
                kv = bn(red, p + 'attn.sr.1').flatten(2).transpose(1, 2)
            q, k, v = (split(lin(t, p + 'attn.' + n), num_heads[i])
                       for t, n in ((a, 'q'), (kv, 'k'), (kv, 'v')))
            scores = q @ k.transpose(-2, -1) * (c // num_heads[i]) ** -0.5
            attn = (scores + sd[f'relative_pos_{letter}']).softmax(-1)
            tokens = tokens + lin((attn @ v).transpose(1, 2).reshape(b, h * w, c),
                                  p + 'attn.proj')
            f = ln(tokens, p + 'norm2', 1e-6).transpose(1, 2).reshape(b, c, h, w)
            f = bn(F.gelu(conv(f, p + 'mlp.conv1.0')), p + 'mlp.conv1.2')
            f = bn(F.gelu(conv(f, p + 'mlp.proj', padding=1, groups=f.shape[1]) + f),
                   p + 'mlp.proj_bn')
            f = bn(conv(f, p + 'mlp.conv2.0'), p + 'mlp.conv2.1')
            tokens = tokens + f.flatten(2).transpose(1, 2)
        x = tokens.transpose(1, 2).reshape(b, c, h, w)
    x = bn(conv(x, '_fc'), '_bn')
    return lin((x * torch.sigmoid(x)).mean((2, 3)), 'head')


def test_forward_matches_official_restatement():
    model = randomize_bn(tiny(fast_paths=True)).eval()
    official = {cmt_official_key(k): v for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = official_logits(official, x, TINY['depths'], TINY['num_heads'],
                                   (8, 4, 2, 1))
        torch.testing.assert_close(model.classify(x), expected, atol=1e-5, rtol=1e-4)


def test_own_checkpoints_bare_and_in_mmengine_wrapper(tmp_path):
    src = randomize_bn(tiny())
    bare, wrapped = tmp_path / 'bare.pth', tmp_path / 'epoch_1.pth'
    torch.save(src.state_dict(), bare)
    torch.save({'meta': {'epoch': 1}, 'state_dict': {
        **{f'backbone.{k}': v for k, v in src.state_dict().items()},
        'neck.conv.weight': torch.zeros(1)}}, wrapped)
    for path, prefix in ((bare, None), (wrapped, None), (wrapped, 'backbone.')):
        cfg = dict(type='Pretrained', checkpoint=str(path))
        if prefix:
            cfg['prefix'] = prefix
        model = tiny(init_cfg=cfg)
        for key, value in src.state_dict().items():
            assert torch.equal(model.state_dict()[key], value), (path, key)


@pytest.mark.parametrize('trained_at,stored_at', [(160, 224), (224, 160)])
def test_checkpoint_at_another_resolution_is_resized_once(tmp_path, trained_at, stored_at):
    src = tiny(pretrain_img_size=trained_at)
    path = tmp_path / 'ckpt.pth'
    torch.save(src.state_dict(), path)
    model = tiny(pretrain_img_size=stored_at,
                 init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    for i, (a, b) in enumerate(zip(src.stages, model.stages)):
        expected = resize_relative_pos(a.relative_pos.detach(), a.query_grid, a.key_grid,
                                       b.query_grid, b.key_grid)
        torch.testing.assert_close(b.relative_pos.detach(), expected)
        side = stored_at // STRIDES[i]
        assert b.query_grid == (side, side)
    # Every other tensor is loaded as is.
    for key, value in src.state_dict().items():
        if not key.endswith('relative_pos'):
            assert torch.equal(model.state_dict()[key], value), key


def test_different_num_classes_skips_head_with_a_warning(tmp_path):
    src = tiny(num_classes=1000)
    path = tmp_path / 'in1k.pth'
    torch.save(src.state_dict(), path)
    model = tiny(num_classes=3, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    assert model.head.weight.shape == (3, TINY['fc_channels'])
    assert torch.equal(model.cls_proj.conv.weight, src.cls_proj.conv.weight)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r'(?s)cmt_small\.pth.*github\.com/ggjy'):
        tiny(init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'cmt_small.pth')))
    src = CMT(arch={**TINY, 'embed_dims': [8, 16, 32, 72]}, pretrain_img_size=64)
    path = tmp_path / 'wide.pth'
    torch.save(src.state_dict(), path)
    with pytest.raises(CheckpointError, match=r'stages\.3\..*\(72.*\(64'):
        tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    odd = tiny(pretrain_img_size=(64, 96)).state_dict()
    path = tmp_path / 'nonsquare.pth'
    torch.save(odd, path)
    with pytest.raises(CheckpointError, match='relative_pos.*not a square grid'):
        tiny(init_cfg=dict(type='Pretrained', checkpoint=str(path)))


# ------------------------------------------------------------------------------ training modes
def test_frozen_stages_and_norm_eval():
    model = tiny(frozen_stages=1, out_norm_cfg=dict(type='LN'))
    model.train()
    for module in (model.stem, model.stages[0], model.out_norms['0']):
        assert not module.training
        assert all(not p.requires_grad for p in module.parameters())
    assert model.stages[1].training
    assert all(p.requires_grad for p in model.stages[1].parameters())
    before = model.stem[0].bn.running_mean.clone()
    model(torch.randn(2, 3, 64, 64))
    assert torch.equal(model.stem[0].bn.running_mean, before)

    model = tiny(norm_eval=True).train()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(not m.training for m in bns)
    assert model.stages[3].blocks[0].norm1.training


def test_with_cp_gives_the_same_gradients():
    torch.manual_seed(0)
    plain = tiny().train()
    ckpt = tiny(with_cp=True).train()
    ckpt.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 64, 80)
    grads = []
    for model in (plain, ckpt):
        loss = sum(o.square().mean() for o in model(x))
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and 'stages.0.relative_pos' in grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------- training memory
def _train_step(model, x, seed=1):
    torch.manual_seed(seed)  # the same drop-path draws in each model
    outs = model(x)
    sum(o.square().mean() for o in outs).backward()
    return ([o.detach() for o in outs],
            {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


@pytest.mark.parametrize('norm_eval', [False, True])
@pytest.mark.parametrize('size', [(64, 64), (64, 96)])  # the stored grid, a resized bias
def test_selective_recomputation_changes_no_value_gradient_or_statistic(norm_eval, size):
    """Recomputing the element-wise operators and the resized bias in the backward runs the
    same operators on the same inputs: outputs, every gradient and the BatchNorm statistics
    (updated once, not again by the recomputation) are bitwise those of storing them."""
    results = []
    for selective_cp in (False, True):
        torch.manual_seed(0)
        model = tiny(drop_path_rate=0.3, norm_eval=norm_eval, selective_cp=selective_cp)
        results.append(_train_step(model.train(), torch.randn(2, 3, *size)))
    (outs_a, grads_a, bufs_a), (outs_b, grads_b, bufs_b) = results
    assert all(torch.equal(a, b) for a, b in zip(outs_a, outs_b))
    assert grads_a.keys() == grads_b.keys() and 'stages.0.relative_pos' in grads_a
    for name in grads_a:
        assert torch.equal(grads_a[name], grads_b[name]), name
    assert all(torch.equal(bufs_a[n], bufs_b[n]) for n in bufs_a)


def test_selective_recomputation_over_several_optimizer_steps_and_accumulation():
    """Training repeats: three SGD steps (the parameters, the bias's source included, change
    in place between them) and one step that accumulates two forwards before its backward
    end with bitwise the weights and BatchNorm statistics of storing everything."""
    finals = []
    for selective_cp in (False, True):
        torch.manual_seed(0)
        model = tiny(drop_path_rate=0.2, selective_cp=selective_cp).train()
        optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        torch.manual_seed(1)
        for step in range(4):
            inputs = [torch.randn(2, 3, 64, 96)] * (2 if step == 3 else 1)
            losses = [sum(o.square().mean() for o in model(x)) for x in inputs]
            sum(losses).backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
        finals.append({**model.state_dict()})
    for name, value in finals[0].items():
        assert torch.equal(value, finals[1][name]), name


def test_selective_recomputation_under_cpu_autocast():
    """The resized bias is rebuilt in the backward under the forward's autocast state (its
    products ran in bfloat16 there), so mixed precision gets the same gradients too."""
    results = []
    for selective_cp in (False, True):
        torch.manual_seed(0)
        model = tiny(selective_cp=selective_cp).train()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            results.append(_train_step(model, torch.randn(2, 3, 64, 96)))
    for name, grad in results[0][1].items():
        assert torch.equal(grad, results[1][1][name]), name


def test_selective_recomputation_keeps_only_products_and_no_bias():
    """After a training forward of a CMT stage at a resized grid, the graph holds no
    BatchNorm, GELU or LayerNorm output of its blocks and no resized (heads, Nq, Nk) bias
    (every block saved it before), and well under two thirds of what storing everything holds."""
    aten = torch.ops.aten
    held = {}
    for selective_cp in (False, True):
        torch.manual_seed(0)
        model = tiny(norm_eval=True, selective_cp=selective_cp).train()
        stage = model.stages[0]
        x = torch.randn(1, 8, 48, 64, requires_grad=True)  # the stem's output at 96x128
        biases = []
        resize = stage.relative_pos_for
        stage.relative_pos_for = lambda *grids: biases.append(resize(*grids)) or biases[-1]
        held[selective_cp], _ = held_for_backward(stage, x, by='operator')
        from torch.multiprocessing.reductions import StorageWeakRef
        bias = StorageWeakRef(biases.pop().untyped_storage())
        assert bias.expired() == selective_cp
    elementwise = {aten.native_batch_norm, aten.gelu, aten.add}
    assert elementwise & held[False].keys()
    # Left: the patch embedding's LayerNorm (the first block's input), products, attention.
    assert not elementwise & held[True].keys(), held[True]
    # 0.56 at this tiny size (0.44 for CMT-S at 800x1333: docs/benchmarks.md).
    assert sum(held[True].values()) < 0.6 * sum(held[False].values())


def test_recomputed_in_backward_rebuilds_once_and_checks_its_sources():
    from cvt_mm.models.recomputation import RecomputedInBackward

    param = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    calls = []

    def expand():
        calls.append(1)
        return (param.repeat(5, 5) * 2).contiguous()

    weights = [torch.randn(15, 20, dtype=torch.float64, requires_grad=True) for _ in range(3)]

    def run():
        big = expand()
        with RecomputedInBackward(big, expand, sources=(param, )):
            return sum((big * w).exp().sum() + big[2:].sum() for w in weights)

    loss = run()
    big = param.repeat(5, 5) * 2  # kept: the same graph, so the same summation order
    plain = sum((big * w).exp().sum() + big[2:].sum() for w in weights)
    grads = torch.autograd.grad(loss, [param, *weights])
    assert len(calls) == 2  # the forward, then once for the three products that saved it
    for a, b in zip(grads, torch.autograd.grad(plain, [param, *weights])):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    loss = run()
    with torch.no_grad():
        param.add_(1.0)
    with pytest.raises(RuntimeError, match='modified in place'):
        loss.backward()


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize('kwargs,match', [
    (dict(arch='l'), r"arch='l' is not supported; allowed: 'ti', 'xs', 's', 'b'"),
    (dict(arch=dict(embed_dims=[8] * 4)), r"missing keys \['num_heads', 'depths'\]"),
    (dict(arch={**TINY, 'width': 2}), r"unknown keys \['width'\]"),
    (dict(arch={**TINY, 'depths': [1, 1, 1]}), r"arch\['depths'\] must hold 4"),
    (dict(arch={**TINY, 'num_heads': [3, 2, 4, 8]}), 'divisible by num_heads'),
    (dict(out_type='tokens'), r"out_type='tokens' is not supported; allowed: 'featmap'"),
    (dict(out_indices=(0, 4)), r'out_indices contains 4.*allowed: 0\.\.3'),
    (dict(out_indices=[]), r'out_indices is empty'),
    (dict(frozen_stages=5), r'frozen_stages must be an int in -1\.\.4'),
    (dict(num_classes=0, out_type='logits'), 'num_classes must be > 0'),
    (dict(drop_path_rate=1.5), r'drop_path_rate must be in \[0, 1\)'),
    (dict(selective_cp=1), 'selective_cp must be True or False'),
    (dict(pretrain_img_size=16), 'pretrain_img_size must be.*>= 32'),
    (dict(init_cfg=dict(type='Pretrained')), 'needs checkpoint=PATH'),
])
def test_bad_options_raise_value_error(kwargs, match):
    kwargs = {'arch': TINY, **kwargs}
    with pytest.raises(ValueError, match=match):
        CMT(**kwargs)


def test_bad_inputs_raise_value_error():
    model = tiny().eval()
    with pytest.raises(ValueError, match=r'at least 32x32.*got 31x64'):
        model(torch.randn(1, 3, 31, 64))
    with pytest.raises(ValueError, match=r'in_channels=3, got an input with 1 channels'):
        model(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match=r'empty batch \(0 images\)'):
        model(torch.randn(0, 3, 64, 64))


def test_training_minimum_for_a_batch_of_one_is_checked():
    model = tiny().train()
    with pytest.raises(ValueError, match=r"batch of 1 at this size: stage 0's smallest map is "
                                         r'1x1.*inputs of at least 33 pixels'):
        model(torch.randn(1, 3, 32, 32))
    model(torch.randn(1, 3, 32, 33))  # the stated minimum works
    model(torch.randn(2, 3, 32, 32))
    model.eval()(torch.randn(1, 3, 32, 32))


# ------------------------------------------------------------------------------ OpenMMLab scopes
def test_built_from_mmdet_registry_with_fpn():
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope
    # Earlier tests' runners leave another toolbox's scope current; builds follow the scope.
    with DefaultScope.overwrite_default_scope('mmdet'):
        backbone = MODELS.build(dict(type='CMT', arch=TINY, pretrain_img_size=64,
                                     out_norm_cfg=dict(type='LN'))).eval()
        neck = MODELS.build(dict(type='FPN', in_channels=backbone.out_channels,
                                 out_channels=16, num_outs=5)).eval()
    with torch.no_grad():
        feats = neck(backbone(torch.randn(1, 3, 97, 131)))
    assert [tuple(f.shape[-2:]) for f in feats] == [(25, 33), (13, 17), (7, 9), (4, 5), (2, 3)]


def test_built_from_mmseg_registry_in_encoder_decoder():
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmseg'):
        segmentor = MODELS.build(dict(
            type='EncoderDecoder',
            backbone=dict(type='CMT', arch=TINY, pretrain_img_size=64),
            decode_head=dict(type='FPNHead', in_channels=TINY['embed_dims'],
                             in_index=[0, 1, 2, 3], feature_strides=[4, 8, 16, 32], channels=8,
                             num_classes=3, norm_cfg=dict(type='BN'), align_corners=False)))
    assert type(segmentor.backbone).__name__ == 'CMT'
    segmentor.eval()
    with torch.no_grad():
        logits = segmentor.encode_decode(torch.randn(1, 3, 96, 128),
                                         [dict(img_shape=(96, 128))])
    assert logits.shape == (1, 3, 96, 128)


def test_mmpretrain_image_classifier_trains_on_logits():
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    # Whatever scope an earlier test left current (MMEngine builds in the current scope's
    # registry, so mmseg's would not know ImageClassifier).
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type='CMT', arch=TINY, pretrain_img_size=64, num_classes=4,
                          out_type='logits'),
            neck=None,
            head=dict(type='ClsHead', loss=dict(type='CrossEntropyLoss'))))
    classifier.init_weights()
    x = torch.randn(4, 3, 64, 64)
    samples = [DataSample().set_gt_label(i % 4) for i in range(4)]
    optim = torch.optim.SGD(classifier.parameters(), lr=0.05)
    losses = []
    for _ in range(3):
        loss = classifier.loss(x, samples)['loss']
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    classifier.eval()
    with torch.no_grad():
        preds = classifier.predict(x)
        torch.testing.assert_close(preds[0].pred_score,
                                   classifier.backbone.classify(x)[0].softmax(-1))


def test_weights_of_another_arch_name_both_archs(tmp_path):
    path = tmp_path / 'cmt_small.pth'
    torch.save(CMT('s').state_dict(), path)
    model = CMT('xs', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(CheckpointError, match=r'tensors of another shape: .*looks like CMT-S; '
                                              r'the model is CMT-XS.*allow_partial=True'):
        model.init_weights()
