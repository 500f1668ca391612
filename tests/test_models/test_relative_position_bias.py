"""RelativePositionBias: a CMT stage's bias at the grids of each input. The cache serves what a
fresh resize gives and only while the parameter is the one it was built from; recomputation
in the backward gives the gradients of keeping the resized bias and frees it in between."""
import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from cvt_mm.models.cmt import CMT
from cvt_mm.models.fast.relative_position_bias import RelativePositionBias
from cvt_mm.models.matrix_resize import resize_relative_pos

QUERY, KEY = (4, 4), (2, 2)  # the stored grids
GRIDS = [((5, 6), (3, 3)), ((3, 7), (2, 4)), ((6, 6), (1, 2))]


def parameter(seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return nn.Parameter(torch.randn(2, 16, 4, generator=gen, dtype=dtype))


def served(cache_size=2, **kwargs):
    return RelativePositionBias(QUERY, KEY, cache_size, **kwargs).eval()


# ------------------------------------------------------------------------------ caching
def test_cached_bias_is_what_a_fresh_resize_gives():
    param, bias = parameter(), served(cache_size=3)
    with torch.no_grad():
        first = [bias(param, *grids) for grids in GRIDS]
        again = [bias(param, *grids) for grids in GRIDS]
    for (q, k), a, b in zip(GRIDS, first, again):
        assert b is a  # served from the cache
        assert torch.equal(a, resize_relative_pos(param.detach(), QUERY, KEY, q, k))
    assert bias.cached_grids == GRIDS


def test_stored_grids_give_the_parameter_itself_cached_or_not():
    param = parameter()
    for module in (served(), served().train()):
        assert module(param, QUERY, KEY) is param
        with torch.no_grad():
            assert module(param, QUERY, KEY) is param


def test_an_in_place_update_invalidates_the_entry():
    param, bias = parameter(), served()
    with torch.no_grad():
        old = bias(param, *GRIDS[0])
        param.mul_(2.0)  # what an optimizer step does
        new = bias(param, *GRIDS[0])
    assert new is not old
    assert torch.equal(new, resize_relative_pos(param.detach(), QUERY, KEY, *GRIDS[0]))


def test_another_parameter_or_dtype_is_not_served_from_the_entry():
    param, other, bias = parameter(0), parameter(1), served()
    with torch.no_grad():
        bias(param, *GRIDS[0])
        from_other = bias(other, *GRIDS[0])
        as_double = bias(param.double(), *GRIDS[0])
    assert torch.equal(from_other, resize_relative_pos(other.detach(), QUERY, KEY, *GRIDS[0]))
    assert as_double.dtype == torch.float64


def test_loading_a_checkpoint_invalidates_the_cache_of_a_model():
    arch = dict(embed_dims=[8, 16, 32, 64], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
                stem_channels=8, fc_channels=32, mlp_ratio=2.0)
    model = CMT(arch=arch, num_classes=0, pretrain_img_size=64).eval()
    stage = model.stages[2]
    grids = ((3, 5), (2, 3))
    with torch.no_grad():
        before = stage.relative_pos_for(*grids)
        sd = model.state_dict()
        sd['stages.2.relative_pos'] = torch.randn_like(sd['stages.2.relative_pos'])
        model.load_state_dict(sd)
        after = stage.relative_pos_for(*grids)
    assert after is not before
    assert torch.equal(after, resize_relative_pos(sd['stages.2.relative_pos'],
                                                  stage.query_grid, stage.key_grid, *grids))


def test_no_cache_in_training_with_a_gradient_or_of_size_zero():
    param = parameter()
    training = served().train()
    with torch.no_grad():
        assert training(param, *GRIDS[0]) is not training(param, *GRIDS[0])
    assert not training.cached_grids
    # Eval mode with autograd on: a cached tensor would cut the gradient to the parameter.
    bias = served()
    out = bias(param, *GRIDS[0])
    assert out.requires_grad and not bias.cached_grids
    out.sum().backward()
    assert param.grad is not None and param.grad.abs().sum() > 0
    none = served(cache_size=0)
    with torch.no_grad():
        assert none(param, *GRIDS[0]) is not none(param, *GRIDS[0])


def test_train_and_eval_drop_the_cache_and_the_lru_is_bounded():
    param, bias = parameter(), served(cache_size=2)
    with torch.no_grad():
        for grids in GRIDS:
            bias(param, *grids)
        assert bias.cached_grids == GRIDS[1:]  # the least recently used dropped
        bias(param, *GRIDS[1])
        assert bias.cached_grids == [GRIDS[2], GRIDS[1]]  # a hit moves to the end
    bias.eval()
    assert not bias.cached_grids
    with pytest.raises(ValueError, match='cache_size must be an int >= 0'):
        RelativePositionBias(QUERY, KEY, -1)


@pytest.mark.parametrize('fast_paths', [True, False])
def test_holds_no_state_so_checkpoint_keys_stay_on_the_stage(fast_paths):
    """On either path (the stage builds the module either way, for set_fast_paths)."""
    assert not served().state_dict()
    model = CMT(arch='ti', num_classes=0, fast_paths=fast_paths)
    keys = [k for k in model.state_dict() if 'relative_pos' in k or 'position_bias' in k]
    assert keys == [f'stages.{i}.relative_pos' for i in range(4)]


# ------------------------------------------------------------------------ recomputation
def _blocks(bias, weights):
    """Several products that each save the bias for the backward, as CMT's blocks do."""
    return sum(((bias * w).exp() * bias).sum() for w in weights)


@pytest.mark.parametrize('recompute', [False, True])
def test_recomputation_gives_the_gradients_of_keeping_the_bias(recompute):
    param = parameter(dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(2, 30, 9, dtype=torch.float64, generator=gen, requires_grad=True)
               for _ in range(3)]
    module = RelativePositionBias(QUERY, KEY, recompute_in_backward=recompute).train()
    resizes = []
    resize = module.resize
    module.resize = lambda *a: resizes.append(1) or resize(*a)

    bias = module(param, *GRIDS[0])
    storage = StorageWeakRef(bias.untyped_storage())
    with module.recomputed_in_backward(bias, param, *GRIDS[0]):
        loss = _blocks(bias, weights)
    del bias
    assert storage.expired() == recompute  # freed between the forward and the backward
    grads = torch.autograd.grad(loss, [param, *weights])
    assert len(resizes) == (2 if recompute else 1)  # once more in the backward, not per use

    kept = resize_relative_pos(param, QUERY, KEY, *GRIDS[0])
    expected = torch.autograd.grad(_blocks(kept, weights), [param, *weights])
    for a, b in zip(grads, expected):
        assert torch.equal(a, b)


def test_recomputation_only_where_a_backward_follows_a_resize():
    param = parameter()
    module = RelativePositionBias(QUERY, KEY, recompute_in_backward=True).train()
    resized = module(param, *GRIDS[0])
    assert type(module.recomputed_in_backward(resized, param, *GRIDS[0])).__name__ == \
        'RecomputedInBackward'
    stored = module(param, QUERY, KEY)
    for ctx in (module.recomputed_in_backward(stored, param, QUERY, KEY),
                module.eval().recomputed_in_backward(resized, param, *GRIDS[0]),
                RelativePositionBias(QUERY, KEY).train().recomputed_in_backward(
                    resized, param, *GRIDS[0])):
        assert type(ctx).__name__ == 'nullcontext'


def test_recomputation_refuses_a_parameter_changed_before_the_backward():
    param = parameter()
    module = RelativePositionBias(QUERY, KEY, recompute_in_backward=True).train()
    bias = module(param, *GRIDS[0])
    with module.recomputed_in_backward(bias, param, *GRIDS[0]):
        loss = (bias * bias).sum()
    with torch.no_grad():
        param.add_(1.0)
    with pytest.raises(RuntimeError, match='modified in place'):
        loss.backward()
