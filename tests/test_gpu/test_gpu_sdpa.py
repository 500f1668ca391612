"""Which `scaled_dot_product_attention` kernel each attention call of CvT-13 and CMT-S runs
(flash, mem-efficient, cudnn, math), per stage, in training and inference, at 800x1333
batch 2 on CUDA. On CUDA the unfused math fallback fails the check; on a CPU (small sizes,
fp32 only) it is only reported, and the check is that every block makes its one call."""
import pytest
import torch

from gpu_helpers import (
    ATTENTION_CALLS,
    BACKBONES,
    CUDA,
    PLAN,
    attention_kernels,
    build_backbone,
    record,
)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope='module', params=list(BACKBONES))
def backbone(request):
    return request.param, build_backbone(request.param).to(PLAN.device)


@pytest.mark.parametrize('precision', ['fp32', 'fp16', 'bf16'])
@pytest.mark.parametrize('mode', ['train', 'eval'])
def test_sdpa(backbone, mode, precision, record_property):
    name, model = backbone
    if precision != 'fp32' and not CUDA:
        pytest.skip('no CUDA: which kernel autocast picks is a CUDA question (and CPU autocast '
                    'is slow)')
    x = torch.randn(PLAN.sdpa_shape, device=PLAN.device)
    counts = attention_kernels(model, x, mode == 'train', precision, PLAN.device)
    if CUDA:
        torch.cuda.synchronize()
    total: dict = {}
    for per_stage in counts.values():
        for kernel, n in per_stage.items():
            total[kernel] = total.get(kernel, 0) + n
    stages = '; '.join(f'{s}: ' + ', '.join(f'{k} x{n}' for k, n in sorted(c.items()))
                       for s, c in sorted(counts.items()))
    size = 'x'.join(map(str, PLAN.sdpa_shape[2:]))
    record(record_property, f'{size}: {stages}' if stages else f'{size}: no SDPA call',
           kernels=counts, shape=list(PLAN.sdpa_shape))
    assert sum(total.values()) == ATTENTION_CALLS[name], 'one SDPA call per block'
    if CUDA:
        assert not total.get('math'), f'{total["math"]} calls take the unfused math path'
