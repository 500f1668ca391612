"""The fast paths the benchmarks rely on: which attention kernel runs, the exact gradient of
CMT's bias through the fused CPU kernel, the fused element-wise rewrites of the blocks,
``torch.compile`` without graph breaks, and the switch that chooses them (process-wide when
blocks are built, per model at any time)."""
import pytest
import torch
from mmcv.cnn.bricks import DropPath
from torch.profiler import ProfilerActivity, profile

import cvt_mm  # noqa: F401  (registers the backbones)
from cvt_mm.models import fast
from cvt_mm.models.cmt import CMT, LMHSA, CMTStage
from cvt_mm.models.cvt import ConvAttention, CvT, Mlp
from cvt_mm.models.fast.attention import (
    BiasGradAttention,
    query_chunked_attention,
    sdpa_attention,
)
from cvt_mm.models.fast.quick_gelu import fused_quick_gelu
from cvt_mm.models.layers import (
    QuickGELU,
    ResidualDropPath,
    merge_heads,
    nlc_to_nchw,
    split_heads,
    split_tokens,
)

FUSED_CPU = 'aten::_scaled_dot_product_flash_attention_for_cpu'
MATH = 'aten::_scaled_dot_product_attention_math'
SMALL_CMT = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
                 stem_channels=8, fc_channels=32, mlp_ratio=2.0)
SMALL_CVT = dict(embed_dims=[16, 32, 64], num_heads=[1, 2, 4], depths=[1, 1, 1])


def reference_attention(q, k, v, scale, bias=None):
    """softmax(q kᵀ * scale + bias) v, as written."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    return torch.matmul(scores.softmax(dim=-1), v)


def small(kind, **kwargs):
    torch.manual_seed(0)
    if kind == 'cmt':
        model = CMT(arch=SMALL_CMT, num_classes=5, drop_path_rate=0.0, pretrain_img_size=64,
                    **kwargs)
    else:
        model = CvT(arch=SMALL_CVT, num_classes=5, **kwargs)
    model.init_weights()
    return model


def attention_ops(fn) -> set:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if 'attention' in e.key}


# ------------------------------------------------------------------------- kernel selection
@pytest.mark.parametrize('kind', ['cmt', 'cvt'])
@pytest.mark.parametrize('mode,size', [('eval', 64), ('eval', 96), ('train', 64), ('train', 96)])
def test_attention_takes_the_fused_cpu_kernel(kind, mode, size):
    """At the stored grid (CMT's bias is then the parameter itself) and at another size, in
    eval and in training: never the unfused math path, which materialises the scores."""
    model = small(kind, out_type='logits')
    x = torch.randn(2, 3, size, size + 32)
    if mode == 'eval':
        model.eval()

        def step():
            with torch.no_grad():
                model(x)
    else:
        model.train()

        def step():
            model(x)[0].sum().backward()
    ops = attention_ops(step)
    assert FUSED_CPU in ops and MATH not in ops, sorted(ops)


def test_a_bias_that_needs_a_gradient_still_gets_the_fused_forward():
    q, k, v = (torch.randn(2, 2, 40, 8) for _ in range(3))
    bias = torch.randn(1, 2, 40, 24, requires_grad=True)
    ops = attention_ops(lambda: sdpa_attention(q, k[:, :, :24], v[:, :, :24], 0.3, bias=bias)
                        .sum().backward())
    assert FUSED_CPU in ops and MATH not in ops, sorted(ops)
    assert bias.grad is not None and bias.grad.abs().sum() > 0


@pytest.mark.parametrize('grad', [False, True])
def test_a_3d_parameter_bias_through_attention_gets_the_fused_kernel(grad):
    """CMT passes its (heads, Nq, Nk) bias, a parameter or a view of one, to the fused attention:
    made 4-D (and detached under no_grad) before the kernel sees it, since a 3-D mask or
    one that requires grad would send it to the math path."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, n, 8, generator=gen) for n in (40, 24, 24))
    bias = torch.nn.Parameter(torch.randn(2, 40, 24, generator=gen))
    with torch.set_grad_enabled(grad):
        ops = attention_ops(lambda: sdpa_attention(q, k, v, 0.3, bias=bias))
        out = sdpa_attention(q, k, v, 0.3, bias=bias)
    assert FUSED_CPU in ops and MATH not in ops, sorted(ops)
    torch.testing.assert_close(out, reference_attention(q, k, v, 0.3, bias=bias))
    assert out.requires_grad == grad


# ------------------------------------------------------------- exact gradients through it
@pytest.mark.parametrize('bias_shape', [(1, 3, 37, 11), (2, 3, 37, 11), (3, 1, 11), (1, 3, 1, 11)])
@pytest.mark.parametrize('rows', [5, 37, 100])
def test_bias_grad_attention_matches_autograd_of_the_plain_formula(bias_shape, rows):
    """Every gradient (q, k, v, bias; the bias broadcast over batch, or over queries) equals
    autograd through softmax(q kᵀ s + b) v, in float64, chunked or not."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 37, 6, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 3, 11, 6, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 3, 11, 6, generator=gen, dtype=torch.float64)
    bias = torch.randn(bias_shape, generator=gen, dtype=torch.float64)
    grad_out = torch.randn(2, 3, 37, 6, generator=gen, dtype=torch.float64)
    results = []
    for fn in (lambda *a: reference_attention(*a[:3], 0.4, bias=a[3]),
               lambda *a: BiasGradAttention.apply(*a, 0.4, rows)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
        out = fn(*leaves)
        out.backward(grad_out)
        results.append([out] + [t.grad for t in leaves])
    for name, ref, ours in zip(('out', 'q', 'k', 'v', 'bias'), *results):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=name)


def test_bias_grad_attention_on_per_head_views_returns_gradients_that_merge_as_views():
    """As the models call it: q, k, v are per-head views of token tensors (k and v split
    from one projection), which the backward copies once; its gradients come back exact,
    and q's in q's layout, so merging the heads back costs no copy."""
    gen = torch.Generator().manual_seed(5)
    heads = 2
    tokens = torch.randn(2, 20, 8, generator=gen, dtype=torch.float64)
    kv_tokens = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)
    bias = torch.randn(1, heads, 20, 6, generator=gen, dtype=torch.float64)
    results = []
    for fn in (lambda *a: reference_attention(*a[:3], 0.4, bias=a[3]),
               lambda *a: BiasGradAttention.apply(*a, 0.4, 7)):
        leaves = [t.clone().requires_grad_() for t in (tokens, kv_tokens, bias)]
        q = split_heads(leaves[0], heads)
        k, v = (split_heads(t, heads) for t in leaves[1].split(8, dim=-1))
        seen = []
        q.register_hook(seen.append)  # the gradient as it reaches the heads' view
        out = fn(q, k, v, leaves[2])
        out.backward(torch.ones_like(out))
        results.append([out] + [t.grad for t in leaves])
    grad_q, = seen
    for name, ref, ours in zip(('out', 'q', 'kv', 'bias'), *results):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=name)
    assert grad_q.stride() == q.stride()
    assert merge_heads(grad_q).data_ptr() == grad_q.data_ptr()


def test_bias_grad_attention_passes_gradcheck():
    gen = torch.Generator().manual_seed(2)
    args = [torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
            for shape in ((1, 2, 9, 4), (1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 9, 5))]
    assert torch.autograd.gradcheck(lambda *a: BiasGradAttention.apply(*a, 0.5, 4), args)


@pytest.mark.parametrize('bias_shape', [None, (1, 3, 37, 11), (2, 3, 37, 11), (1, 3, 1, 11)])
def test_query_chunks_give_the_plain_formula_and_its_gradients(bias_shape):
    """The path for a backend that would build the score matrix (CUDA without a fused kernel
    for the inputs, other devices, dropout on the CPU): 37 queries in chunks of 8 (the last
    short), a bias per query or one row for all; the output and every gradient equal
    autograd through softmax(q kᵀ s + b) v."""
    gen = torch.Generator().manual_seed(4)
    shapes = [(2, 3, 37, 6), (2, 3, 11, 6), (2, 3, 11, 6)] + ([bias_shape] if bias_shape else [])
    inputs = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    results = []
    for fn in (lambda q, k, v, b=None: reference_attention(q, k, v, 0.4, bias=b),
               lambda q, k, v, b=None: query_chunked_attention(q, k, v, 0.4, b, 0.0, rows=8)):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = fn(*leaves)
        out.square().sum().backward()
        results.append([out] + [t.grad for t in leaves])
    for ref, ours in zip(*results):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_bias_grad_attention_in_low_precision_is_close_to_float32(dtype):
    """Under CPU autocast the inputs are 16-bit; chunk sums accumulate in float32."""
    gen = torch.Generator().manual_seed(3)
    base = [torch.randn(shape, generator=gen) for shape in
            ((2, 2, 64, 16), (2, 2, 20, 16), (2, 2, 20, 16), (1, 2, 64, 20))]
    grads = {}
    for dt in (torch.float32, dtype):
        leaves = [t.to(dt, copy=True).requires_grad_() for t in base]
        BiasGradAttention.apply(*leaves, 0.25, 16).float().square().sum().backward()
        grads[dt] = [t.grad.float() for t in leaves]
    for name, ref, low in zip('qkvb', grads[torch.float32], grads[dtype]):
        assert (low - ref).abs().max() <= 0.05 * ref.abs().max(), name


# ----------------------------------------------------------------- fused element-wise passes
def values_and_grads(fn, *inputs):
    """``fn()`` and the gradients of a fixed random projection of it w.r.t. those of
    ``inputs`` (tensors and parameters) that require one."""
    out = fn()
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    leaves = [t for t in inputs if t.requires_grad]
    return out, torch.autograd.grad((out * weights).sum(), leaves)


def test_cvt_mlp_is_fc2_of_quick_gelu_of_fc1_with_its_gradients():
    """``silu(a h) / a`` computed in place gives the official MLP, values and gradients."""
    torch.manual_seed(0)
    mlp = CvT(arch=SMALL_CVT).stages[0].blocks[0].mlp
    x = torch.randn(2, 7, 16, requires_grad=True)
    params = [x, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias]
    fused = values_and_grads(lambda: mlp(x), *params)
    plain = values_and_grads(lambda: mlp.fc2(QuickGELU()(mlp.fc1(x))), *params)
    torch.testing.assert_close(fused[0], plain[0])
    for a, b in zip(fused[1], plain[1]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('requires_grad', [True, False])
def test_fused_quick_gelu_leaves_its_input_and_matches_the_formula(requires_grad):
    """Values and gradients of ``x * sigmoid(1.702 x)``, on a Linear's 3-D output (a view of
    the product, where an in-place rewrite costs autograd copies) and with autograd off."""
    torch.manual_seed(0)
    fc = torch.nn.Linear(6, 12).requires_grad_(requires_grad)
    x = torch.randn(2, 5, 6)
    h = fc(x)
    before = h.detach().clone()
    params = list(fc.parameters())
    if requires_grad:
        fused = values_and_grads(lambda: fused_quick_gelu(fc(x)), *params)
        plain = values_and_grads(lambda: QuickGELU()(fc(x)), *params)
        for a, b in zip(fused[1], plain[1]):
            torch.testing.assert_close(a, b)
    out = fused_quick_gelu(h)
    torch.testing.assert_close(out, QuickGELU()(h))
    assert torch.equal(h, before)  # the input is not overwritten


def test_split_tokens_is_two_slices_with_one_gradient_tensor():
    x = torch.randn(2, 1 + 12, 4, requires_grad=True)
    cls_token, tokens = split_tokens(x, 1)
    assert torch.equal(cls_token, x[:, :1]) and torch.equal(tokens, x[:, 1:])
    weights = torch.randn(2, 13, 4)
    grad, = torch.autograd.grad((cls_token * weights[:, :1]).sum()
                                + (tokens * weights[:, 1:]).sum(), x)
    torch.testing.assert_close(grad, weights)
    none, all_tokens = split_tokens(x, 0)  # no cls token: all of them
    assert none.shape == (2, 0, 4) and torch.equal(all_tokens, x)


@pytest.mark.parametrize('batch', [1, 2])
def test_token_maps_reach_the_convolutions_as_channels_last_views(batch):
    # A batch of one once got a view with batch stride C; the CPU convolutions then copied it
    # and ran their NCHW kernels, 10-15x slower (issue 60).
    x = torch.randn(batch, 6 * 7, 8)
    nchw = nlc_to_nchw(x, (6, 7))
    assert nchw.data_ptr() == x.data_ptr() and nchw.stride() == (6 * 7 * 8, 1, 7 * 8, 8)
    torch.testing.assert_close(nchw, x.transpose(1, 2).reshape(batch, 8, 6, 7))
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
    assert conv(nchw).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize('kind', ['cmt', 'cvt'])
def test_a_batch_of_one_takes_the_convolution_layouts_of_a_larger_batch(kind):
    model = small(kind).eval()
    layouts = {}

    def record(batch):
        def hook(module, inputs, output):
            layouts.setdefault(batch, []).append(
                output.is_contiguous(memory_format=torch.channels_last))
        return hook

    for batch in (1, 2):
        handles = [m.register_forward_hook(record(batch)) for m in model.modules()
                   if isinstance(m, torch.nn.Conv2d)]
        with torch.no_grad():
            model(torch.randn(batch, 3, 64, 64))
        for handle in handles:
            handle.remove()
    assert any(layouts[2]) and layouts[1] == layouts[2]


@pytest.mark.parametrize('drop_prob', [0.0, 0.3])
def test_residual_drop_path_draws_and_scales_as_mmcv_drop_path(drop_prob):
    x = torch.randn(64, 5, 6, requires_grad=True)
    branch = torch.randn(64, 5, 6, requires_grad=True)
    results = []
    for fn in (lambda: ResidualDropPath(drop_prob)(x, branch),
               lambda: x + DropPath(drop_prob)(branch)):
        torch.manual_seed(4)
        results.append(values_and_grads(fn, x, branch))
    (ours, (gx, gb)), (theirs, (tx, tb)) = results
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(gx, tx)
    torch.testing.assert_close(gb, tb)
    dropped = (ours - x).detach().flatten(1).abs().amax(1) == 0
    # Whole samples are dropped, about drop_prob of them, and the others are rescaled.
    assert 0.1 <= dropped.float().mean() <= 0.5 if drop_prob else not dropped.any()


def test_residual_drop_path_is_a_plain_sum_in_eval_and_checks_its_rate():
    x, branch = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    assert torch.equal(ResidualDropPath(0.5).eval()(x, branch), x + branch)
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=r'drop_prob must be in \[0, 1\)'):
            ResidualDropPath(bad)


# ----------------------------------------------------------------------------- torch.compile
@pytest.mark.parametrize('kind', ['cmt', 'cvt'])
def test_backbones_compile_without_graph_breaks(kind):
    """``fullgraph=True`` raises at the first graph break. Dynamo's tracing is what is
    checked (the ``eager`` backend runs the traced graph as is, so the test takes seconds,
    not the minutes of inductor's C++ codegen); outputs and gradients equal the module's."""
    model = small(kind).train()
    # dynamic=False: a second input size recompiles for that size (automatic dynamic shapes
    # would retrace symbolically, a minute here, and is not what is being checked).
    compiled = torch.compile(model, fullgraph=True, backend='eager', dynamic=False)
    x = torch.randn(2, 3, 64, 96)
    grads = []
    for fn in (model, compiled):
        model.zero_grad()
        torch.manual_seed(0)
        outs = fn(x)
        sum(o.square().mean() for o in outs).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)
    model.eval()
    with torch.no_grad():
        for size in ((64, 96), (80, 80)):  # the stored grid and a resized bias
            x = torch.randn(1, 3, *size)
            for a, b in zip(compiled(x), model(x)):
                torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------- the switch
# The blocks that have a fast path, each choosing by its own ``fast_path``.
LEAVES = {'cvt': (ConvAttention, Mlp), 'cmt': (LMHSA, CMTStage)}


def fast_path_flags(model) -> set:
    return {m.fast_path for m in model.modules() if hasattr(m, 'fast_path')}


def test_one_switch_chooses_the_paths_of_the_blocks_built_after_it(monkeypatch):
    """``set_fast_paths`` and ``CVT_MM_FAST_PATHS`` decide what every block built after them
    reads into its ``fast_path``; ``fast_paths=`` on a model overrides both."""
    monkeypatch.delenv(fast.ENV_VAR, raising=False)
    try:
        assert fast.use_fast_paths()
        assert fast_path_flags(small('cvt')) == fast_path_flags(small('cmt')) == {True}
        fast.set_fast_paths(False)
        assert fast_path_flags(small('cvt')) == fast_path_flags(small('cmt')) == {False}
        assert fast_path_flags(small('cvt', fast_paths=True)) == {True}  # the model's own wins
        fast.set_fast_paths(None)
        monkeypatch.setenv(fast.ENV_VAR, '0')
        assert fast_path_flags(small('cmt')) == {False}
        assert fast_path_flags(small('cvt')) == {False}
        monkeypatch.setenv(fast.ENV_VAR, 'fast')
        with pytest.raises(ValueError, match="CVT_MM_FAST_PATHS='fast' is not understood; "
                                             'allowed: 0, 1, false, true'):
            small('cvt')
        with pytest.raises(ValueError, match='set_fast_paths takes True, False or None'):
            fast.set_fast_paths('yes')
    finally:
        fast.set_fast_paths(None)


@pytest.mark.parametrize('kind', ['cmt', 'cvt'])
def test_a_model_s_set_fast_paths_flips_every_block(kind, monkeypatch):
    """One model's choice, as timm's modules keep ``fused_attn``: ``set_fast_paths(False)``
    turns every block with a fast path to the formulas as written, after which the model
    computes bit for bit what a model built with the switch off computes (at 80x112, where
    CMT's bias is resized from its stored 64x64 grids); ``True`` brings the fused kernel back.
    The weights and their keys stay as they are."""
    monkeypatch.delenv(fast.ENV_VAR, raising=False)
    model = small(kind, out_type='logits').eval()
    try:
        fast.set_fast_paths(False)
        reference = small(kind, out_type='logits').eval()
    finally:
        fast.set_fast_paths(None)
    leaves = [m for m in model.modules() if hasattr(m, 'fast_path')]
    assert leaves == [m for m in model.modules() if isinstance(m, LEAVES[kind])]
    assert len(leaves) >= 6 and fast_path_flags(reference) == {False}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 80, 112)
    with torch.no_grad():
        expected = reference(x)[0]
        fused = model(x)[0]

        model.set_fast_paths(False)
        assert not any(m.fast_path for m in leaves)
        assert torch.equal(model(x)[0], expected)
        assert FUSED_CPU not in attention_ops(lambda: model(x))

        model.set_fast_paths(True)
        assert all(m.fast_path for m in leaves)
        assert torch.equal(model(x)[0], fused)
        assert FUSED_CPU in attention_ops(lambda: model(x))
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-4)
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match='set_fast_paths takes True or False, got None'):
        model.set_fast_paths(None)
