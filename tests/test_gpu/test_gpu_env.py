"""The stack `make gpu-check` runs on: versions, GPUs and mmcv's build (the header of the
summary), mmcv compiled with CUDA ops, and those ops (RoIAlign forward and backward, NMS)
against their CPU results."""
import os
import platform
import subprocess
import sys

import pytest
import torch

from gpu_helpers import CUDA, DEVICE, PLAN, no_cuda, record

pytestmark = [pytest.mark.gpu, pytest.mark.slow]



def _mmcv_info(name: str) -> str:
    """mmcv's ``get_compiler_version`` / ``get_compiling_cuda_version``, asked in a process of
    its own: on the H200 node of 2026-12-04 (torch 2.11, CUDA 13, mmcv built there) these
    calls crashed the pytest process (SIGSEGV) in two runs of three, which ends every check."""
    proc = subprocess.run([sys.executable, '-c', f'from mmcv.ops import {name}; print({name}())'],
                          capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() if proc.returncode == 0 else f'crashed (exit {proc.returncode})'


def test_environment(record_property):
    """The stack imports and registers our backbones; on CUDA, torch computes on the GPU."""
    import mmcv
    import mmdet
    import mmengine
    import mmpretrain
    import mmseg
    from mmengine.registry import MODELS  # the root registry every toolbox's MODELS reaches

    import cvt_mm  # noqa: F401  (registers the backbones)
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if CUDA else []
    environment = dict(
        device=DEVICE, python=platform.python_version(), torch=torch.__version__,
        torch_cuda=torch.version.cuda, gpus=gpus, cpus=os.cpu_count(),
        mmcv=mmcv.__version__, mmcv_compiler=_mmcv_info('get_compiler_version'),
        mmcv_cuda=_mmcv_info('get_compiling_cuda_version'), mmengine=mmengine.__version__,
        mmdet=mmdet.__version__, mmseg=mmseg.__version__, mmpretrain=mmpretrain.__version__,
        plan={k: list(v) if isinstance(v, tuple) else v for k, v in vars(PLAN).items()})
    result = (f'torch {torch.__version__} (CUDA {torch.version.cuda}), '
              + (f'{len(gpus)} x {", ".join(sorted(set(gpus)))}' if gpus else 'no GPU'))
    record(record_property, result, environment=environment)
    assert MODELS.get('CvT') is not None and MODELS.get('CMT') is not None
    if CUDA:
        x = torch.arange(4.0, device='cuda')
        assert (x @ x).item() == 14.0


@no_cuda('whether mmcv was compiled with CUDA ops')
def test_mmcv_cuda_ops(record_property):
    cuda = _mmcv_info('get_compiling_cuda_version')
    compiler = _mmcv_info('get_compiler_version')
    record(record_property, f'ops compiled with {compiler}, CUDA {cuda}')
    assert cuda not in ('not available', None, ''), 'no CUDA ops: rebuild mmcv with FORCE_CUDA=1'


def _mmcv_ops_outputs(device: str):
    """RoIAlign's output and input gradient, and the boxes NMS keeps, on ``device``."""
    from mmcv.ops import nms, roi_align
    gen = torch.Generator().manual_seed(0)
    feats = torch.rand(2, 16, 50, 64, generator=gen)
    xy = torch.rand(64, 2, generator=gen) * 150
    wh = torch.rand(64, 2, generator=gen) * 80 + 4
    rois = torch.cat([torch.randint(0, 2, (64, 1), generator=gen).float(), xy, xy + wh], dim=1)
    feats = feats.to(device).requires_grad_()
    pooled = roi_align(feats, rois.to(device), (7, 7), 0.25, 0, 'avg', True)
    weights = torch.randn(pooled.shape, generator=gen).to(device)
    (pooled * weights).sum().backward()
    boxes = torch.rand(400, 2, generator=gen) * 300
    boxes = torch.cat([boxes, boxes + torch.rand(400, 2, generator=gen) * 60 + 1], dim=1)
    scores = torch.rand(400, generator=gen)
    _, keep = nms(boxes.to(device), scores.to(device), 0.5)
    return dict(pooled=pooled.detach().cpu(), grad=feats.grad.cpu(), keep=keep.cpu(),
                boxes=boxes, scores=scores)


def test_mmcv_ops_cpu(record_property):
    """The compiled CPU ops: RoIAlign of a constant map is that constant, and NMS keeps the
    best box and no two kept boxes overlap above the threshold."""
    from mmcv.ops import roi_align
    from torchvision.ops import box_iou
    feats = torch.full((1, 2, 20, 20), 3.0)
    rois = torch.tensor([[0, 2.0, 2.0, 12.0, 9.0], [0, 0.0, 0.0, 19.0, 19.0]])
    pooled = roi_align(feats, rois, (7, 7), 1.0, 2, 'avg', True)
    out = _mmcv_ops_outputs('cpu')
    kept = out['boxes'][out['keep']]
    iou = box_iou(kept, kept).fill_diagonal_(0)
    record(record_property, f'RoIAlign fwd/bwd ran, NMS kept {len(kept)} of '
           f'{len(out["boxes"])} boxes, largest IoU between kept {iou.max():.2f}')
    assert torch.allclose(pooled, torch.full_like(pooled, 3.0))
    assert torch.isfinite(out['pooled']).all() and out['grad'].abs().sum() > 0
    assert 0 < len(kept) < len(out['boxes'])
    assert out['keep'][0] == out['scores'].argmax() and iou.max() <= 0.5


@no_cuda('RoIAlign and NMS on CUDA against their CPU results')
def test_mmcv_ops_cuda_vs_cpu(record_property):
    cpu, gpu = _mmcv_ops_outputs('cpu'), _mmcv_ops_outputs('cuda')
    d_fwd = (gpu['pooled'] - cpu['pooled']).abs().max().item()
    d_bwd = (gpu['grad'] - cpu['grad']).abs().max().item()
    same_keep = torch.equal(gpu['keep'].sort().values, cpu['keep'].sort().values)
    record(record_property, f'RoIAlign |fwd diff| {d_fwd:.1e}, |bwd diff| {d_bwd:.1e}; NMS '
           f'keeps the same {len(cpu["keep"])} boxes: {same_keep}', roi_align_fwd=d_fwd,
           roi_align_bwd=d_bwd, nms_same=same_keep)
    assert d_fwd < 1e-4 and d_bwd < 1e-4
    assert same_keep
