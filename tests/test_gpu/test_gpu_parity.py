"""CvT-13 and CMT-S forward + backward on the device against the CPU in fp32: fp32 (TF32
off), fp16 and bf16 autocast, by the relative L2 error of the outputs and of all gradients.
Without CUDA the device is the CPU: fp32 must then match exactly, and CPU autocast runs."""
import contextlib

import pytest
import torch

from gpu_helpers import (
    BACKBONES,
    CUDA,
    PLAN,
    TOLERANCES,
    build_backbone,
    forward_backward,
    no_tf32,
    parity_errors,
    parity_reference,
    record,
)


@pytest.fixture(scope='module', params=list(BACKBONES))
def reference(request):
    return parity_reference(request.param, PLAN.parity_shape)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize('precision', list(TOLERANCES))
def test_parity(reference, precision, record_property):
    model = build_backbone(reference['name'])
    model.load_state_dict(reference['state'])
    with no_tf32() if precision == 'fp32' else contextlib.nullcontext():
        outs, grads = forward_backward(model, reference['x'], reference['weights'],
                                       PLAN.device, precision)
    if CUDA:
        torch.cuda.synchronize()
    out_err, grad_err = parity_errors(outs, grads, reference)
    tol_out, tol_grad = TOLERANCES[precision]
    record(record_property, f'rel. error out {out_err:.1e} (tol {tol_out:.0e}), grads '
           f'{grad_err:.1e} (tol {tol_grad:.0e})', out_rel_error=out_err,
           grad_rel_error=grad_err, tolerance=[tol_out, tol_grad],
           shape=list(PLAN.parity_shape))
    assert all(torch.isfinite(o).all() for o in outs) and torch.isfinite(grads).all()
    assert out_err <= tol_out and grad_err <= tol_grad
    if precision != 'fp32':
        assert out_err > 0, 'autocast left the outputs in fp32'
    elif not CUDA:
        assert out_err == 0 and grad_err == 0  # the same CPU computation twice


def test_parity_errors_see_a_one_percent_error():
    """The comparison the parity checks make (no GPU needed: it runs in `make test`)."""
    gen = torch.Generator().manual_seed(0)
    reference = dict(outs=[torch.randn(2, 8, 16, 16, generator=gen) for _ in range(3)],
                     grads=torch.randn(10000, generator=gen))
    outs = [o.clone() for o in reference['outs']]
    assert parity_errors(outs, reference['grads'].clone(), reference) == (0, 0)
    outs[1] = outs[1] * 1.01  # one pyramid level 1 % off
    out_err, grad_err = parity_errors(outs, reference['grads'] * 1.02, reference)
    assert out_err == pytest.approx(0.01, rel=1e-4) and grad_err == pytest.approx(0.02, rel=1e-4)
