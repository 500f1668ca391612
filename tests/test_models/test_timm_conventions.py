"""What timm's own model tests (its tests/test_models.py) ask of a timm model, asked here of
the seven: ``pretrained_cfg['pool_size']`` is the map ``forward_features`` gives at the default
input size; a model built under ``timm.set_scriptable(True)`` scripts and gives the eager
logits; torch.fx traces it with timm's notrace leaves (torchvision's
``create_feature_extractor``), giving the eager output exactly and a gradient to every
parameter in training; ``torch.export`` exports it and gives the eager logits.
(``.dev_scripts/run_timm_suite.sh`` runs timm's file itself.)

Cost: the smallest model of each family (CvT-13, CMT-Ti) runs with real weights at a small
size; the other five are the same classes at other widths and depths, so they are built on
the meta device, where TorchScript still compiles and fx still traces each variant's wiring
without computing anything.
"""
import pytest
import timm
import torch
from timm import set_scriptable
from timm.models import get_notrace_functions, get_notrace_modules
from torchvision.models.feature_extraction import NodePathTracer, create_feature_extractor

import cvt_mm  # noqa: F401  (registers the timm models)
from cvt_mm.apis.deployment import MIN_DYNAMIC_SIDE
from cvt_mm.models.layers import ceil_div
from cvt_mm.models.matrix_resize import resize_relative_pos

NAMES = ['cvt_13', 'cvt_21', 'cvt_w24', 'cmt_ti', 'cmt_xs', 'cmt_s', 'cmt_b']
REAL = ['cvt_13', 'cmt_ti']
META = [name for name in NAMES if name not in REAL]
# As timm's tests trace: its leaves (ours join them where timm is installed), parameter
# shapes as constants.
TRACER = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions(),
              param_shapes_constant=True)
# Odd sizes (CMT pads at every stride-2 step), off the stored bias grids (CMT resizes them).
SIZE = (67, 83)


def build(name: str) -> torch.nn.Module:
    """The timm model: seeded real weights for ``REAL`` names, on the meta device otherwise."""
    if name in REAL:
        torch.manual_seed(0)
        return timm.create_model(name)
    with torch.device('meta'):
        return timm.create_model(name)


@pytest.fixture(scope='module')
def real_models():
    return {name: build(name) for name in REAL}


def images(batch: int = 1, size=SIZE) -> torch.Tensor:
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(batch))


@pytest.mark.parametrize('name', NAMES)
def test_pool_size_is_the_map_forward_features_gives_at_the_default_size(name):
    """timm's test_model_default_cfgs compares ``pool_size`` with the unpooled features at
    each pretrained tag's input size. CvT, a cls-token family, gives tokens and no pool size,
    as timm's ViTs (timm's tests list such families in NON_STD_FILTERS)."""
    with torch.device('meta'):
        model = timm.create_model(name).eval()
    for tag in timm.list_pretrained(f'{name}.*'):
        cfg = timm.models.get_pretrained_cfg(tag).to_dict()
        # (With autograd on: the eval-mode bias cache reads data pointers, which meta lacks.)
        features = model.forward_features(torch.empty(1, *cfg['input_size'], device='meta'))
        if model.family == 'cvt':
            assert cfg['pool_size'] is None, tag
            assert features.dim() == 3 and features.shape[-1] == model.num_features, tag
        else:
            assert features.shape[1] == model.num_features, tag
            assert tuple(features.shape[-2:]) == cfg['pool_size'], tag


@pytest.mark.parametrize('name', REAL)
def test_a_scripted_model_gives_the_eager_logits(name, real_models):
    """As timm's test_model_forward_torchscript builds and scripts it. The scripted forward
    computes the reference formulas where the eager one takes a fast path (fused attention
    and QuickGELU, CMT's bias resize and cache), so the logits agree to float rounding."""
    eager = real_models[name].eval()
    with set_scriptable(True):
        scriptable = build(name).eval()
    scriptable.load_state_dict(eager.state_dict())
    scripted = torch.jit.script(scriptable)
    with torch.no_grad():
        torch.testing.assert_close(scripted(images()), eager(images()), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', META)
def test_every_other_variant_scripts_and_traces(name):
    """The same code as CvT-13's and CMT-Ti's at other widths, heads and depths: each
    compiles under TorchScript and traces under fx in training mode (the mode with more
    branches: drop path, BatchNorm statistics) with every parameter in the graph."""
    with set_scriptable(True):
        model = build(name)
    torch.jit.script(model.eval())
    graph = NodePathTracer(**TRACER).trace(model.train())
    used = {node.target for node in graph.nodes if node.op == 'get_attr'}
    modules = {node.target for node in graph.nodes if node.op == 'call_module'}
    assert all(param in used or param.rsplit('.', 1)[0] in modules
               for param, _ in model.named_parameters())


# (The train graph holds drop path's nodes, which the eval graph lacks.)
@pytest.mark.filterwarnings('ignore:The nodes obtained by tracing the model in train mode')
@pytest.mark.parametrize('name', REAL)
def test_fx_traces_with_timm_s_leaves_to_the_eager_output_and_trains(name, real_models):
    """timm's test_model_forward_fx and test_model_backward_fx: torchvision's feature
    extractor traces the model in eval and in train mode; the eval graph gives the model's
    output exactly, and a backward through the train graph reaches every parameter."""
    model = real_models[name]
    traced = create_feature_extractor(model, return_nodes={'head': 'logits'},
                                      tracer_kwargs=TRACER)
    with torch.no_grad():
        assert torch.equal(traced.eval()(images())['logits'], model.eval()(images()))
    model.zero_grad()
    traced.train()(images(batch=2))['logits'].mean().backward()
    without_grad = [n for n, p in traced.named_parameters() if p.grad is None]
    assert without_grad == []
    assert sum(p.numel() for p in traced.parameters()) == \
        sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('name', REAL)
def test_torch_export_at_the_default_size_gives_the_eager_logits(name, real_models):
    """The eval model at its default input size, as eager runs it: the fast paths, with the
    attention one plain ``scaled_dot_product_attention`` call under export."""
    model = real_models[name].eval()
    x = images(size=model.pretrained_cfg['input_size'][1:])
    exported = torch.export.export(model, (x, )).module()
    with torch.no_grad():
        torch.testing.assert_close(exported(x), model(x), rtol=1e-5, atol=1e-6)


class _BiasAtImageSize(torch.nn.Module):
    """A CMT-like last-stage bias (5x5 queries and keys) resized to the stride-32 grid of
    the image it is given."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(2, 25, 25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = (ceil_div(x.shape[-2], 32), ceil_div(x.shape[-1], 32))
        return resize_relative_pos(self.bias, (5, 5), (5, 5), grid, grid)


def test_torch_export_with_dynamic_size_resizes_the_bias_in_the_graph():
    """With symbolic height and width (from ``MIN_DYNAMIC_SIDE``, as the ONNX export has
    them), the graph resizes CMT's biases itself, and torch.export must prove its size
    arithmetic for every size in the range (a reshape of the interpolation matrix once made
    it give up on ``ceil(H / 32) != 1``). The resize alone: a whole model's dynamic export
    takes 10-30 s on 2 cores (the ONNX tests export every arch's backbone so)."""
    torch.manual_seed(0)
    module = _BiasAtImageSize()
    dims = {2: torch.export.Dim('h', min=MIN_DYNAMIC_SIDE),
            3: torch.export.Dim('w', min=MIN_DYNAMIC_SIDE)}
    exported = torch.export.export(module, (torch.zeros(1, 3, 64, 64), ),
                                   dynamic_shapes=(dims, )).module()
    for size in ((64, 64), (97, 131), (160, 160)):
        x = torch.zeros(1, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(exported(x), module(x), rtol=1e-5, atol=1e-5)
