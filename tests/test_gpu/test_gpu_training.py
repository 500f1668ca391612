"""Training on the device. `train_step`: Mask R-CNN CvT-13 and MMDetection's Swin-T Mask R-CNN
at 1333x800 and UperNet CvT-13 at 512x512, batch 2, AMP, whose losses must stay finite; the
median step time and peak CUDA memory are measurements for the summary (no time limit is
asserted). `ddp`: tools/dist_train.sh with the demo configs on generated data, NCCL on
min(2, GPUs) GPUs, which must finish at least 3 iterations with a checkpoint and keep SyncBN
(without CUDA: Mask R-CNN only, gloo on 2 CPU processes; tests/test_engine/test_distributed.py
trains the other configs on gloo)."""
import math
import os
import os.path as osp
import re
import socket
import statistics
import subprocess
import sys

import pytest
import torch

from gpu_helpers import CUDA, PLAN, ROOT, record

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

TRAIN_CONFIGS = {
    'MaskRCNN-CvT13': 'configs/mask_rcnn_cvt13_coco.py',
    'MaskRCNN-SwinT-mmdet': 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py',
    'UperNet-CvT13': 'configs/upernet_cvt13_ade20k.py',
}
# The demo's configs (the real ones, sized for small data) on generated data.
DDP_CONFIGS = {
    'MaskRCNN-CvT13': ('configs/demo/mask_rcnn_cvt13_demo.py', 'coco'),
    'UperNet-CvT13': ('configs/demo/upernet_cvt13_demo.py', 'ade'),
}
# The CPU rehearsal runs one of them: each gloo run costs half a minute of CI.
REHEARSAL_DDP = ('MaskRCNN-CvT13', )


@pytest.mark.parametrize('name', list(TRAIN_CONFIGS))
def test_train_step(name, record_property):
    from mmengine.optim import build_optim_wrapper

    from benchmarks.measure import peak_memory_gib, time_steps
    from cvt_mm.apis.builders import build_model_from_config, load_config, synthetic_batch
    config = TRAIN_CONFIGS[name]
    cfg = load_config(config if '::' in config else osp.join(ROOT, config))
    torch.manual_seed(0)
    model = build_model_from_config(cfg, device=PLAN.device)
    seg = cfg.get('default_scope') == 'mmseg'
    height, width = PLAN.seg_shape if seg else PLAN.det_shape
    if seg:
        model.data_preprocessor.size = (height, width)
    optim_cfg = cfg.optim_wrapper.copy()
    if PLAN.amp:
        optim_cfg.update(type='AmpOptimWrapper', loss_scale='dynamic')
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    batch = synthetic_batch(model, batch_size=2, height=height, width=width)
    losses = []

    def step():
        losses.append(float(model.train_step(batch, optim_wrapper)['loss'].detach()))

    time_steps(step, 0, PLAN.warmup_steps, PLAN.device)
    if CUDA:
        torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, 0, PLAN.timed_steps, PLAN.device)
    median = statistics.median(times)
    peak = peak_memory_gib(PLAN.device) if CUDA else None
    record(record_property, f'{height}x{width} batch 2{" AMP" if PLAN.amp else ""}: median '
           f'{median:.3f} s of {len(times)} steps'
           + (f', peak {peak:.2f} GiB' if peak is not None else ''),
           median_s=median, times_s=times, peak_gib=peak, losses=losses, shape=[height, width])
    model = optim_wrapper = None  # free the memory before the next check
    if CUDA:
        torch.cuda.empty_cache()
    assert len(losses) == PLAN.warmup_steps + PLAN.timed_steps
    assert all(math.isfinite(v) for v in losses), losses


@pytest.fixture(scope='module')
def ddp_data(tmp_path_factory):
    data = str(tmp_path_factory.mktemp('ddp_data'))
    subprocess.run([sys.executable, osp.join(ROOT, 'tools', 'misc', 'make_demo_data.py'),
                    '--out', data, '--size', str(PLAN.ddp_image_size), '--coco-train', '8',
                    '--coco-val', '2', '--ade-train', '8', '--ade-val', '2', '--seed', '3'],
                   check=True, capture_output=True, cwd=ROOT)
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _demo_run_config(path: str, demo: str, data_root: str, work: str, epochs: int) -> str:
    """The demo config ``demo`` (real config files) on the generated data at ``data_root``,
    from random weights, ``epochs`` epochs (detection) or 4 iterations (segmentation)."""
    data_root = data_root.rstrip('/') + '/'
    if 'mask_rcnn' in demo:
        schedule = (f"val_evaluator = dict(ann_file=data_root + "
                    f"'annotations/instances_val2017.json')\n"
                    f"test_evaluator = val_evaluator\n"
                    f"train_cfg = dict(max_epochs={epochs}, val_interval={epochs})\n"
                    f"default_hooks = dict(logger=dict(interval=1), "
                    f"checkpoint=dict(interval={epochs}))\n")
    else:
        schedule = ("train_cfg = dict(max_iters=4, val_interval=4)\n"
                    "default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=4))\n")
    # The demo asks for deterministic kernels (its CPU numbers are exact); on CUDA, UperNet's
    # AdaptiveAvgPool2d backward has no deterministic implementation and PyTorch then raises
    # (docs/cluster.md, "On GPUs"), so the GPU run leaves the kernels' choice to PyTorch.
    if CUDA:
        schedule += "randomness = dict(seed=0, deterministic=False)\n"
    with open(path, 'w') as f:
        f.write(f"_base_ = {osp.join(ROOT, demo)!r}\n"
                f"data_root = {data_root!r}\n"
                "model = dict(backbone=dict(init_cfg=None))\n"
                "train_dataloader = dict(batch_size=2, dataset=dict(data_root=data_root))\n"
                "val_dataloader = dict(dataset=dict(data_root=data_root))\n"
                "test_dataloader = val_dataloader\n" + schedule + f"work_dir = {work!r}\n")
    return path


@pytest.mark.parametrize('name', list(DDP_CONFIGS))
def test_ddp(name, ddp_data, tmp_path, record_property):
    if not CUDA and name not in REHEARSAL_DDP:
        pytest.skip('no CUDA: the CPU rehearsal runs one gloo training '
                    '(tests/test_engine/test_distributed.py trains this config on gloo)')
    demo, kind = DDP_CONFIGS[name]
    nprocs = min(2, torch.cuda.device_count()) if CUDA else 2
    work = str(tmp_path / 'work')
    # 8 images, batch 2 per process: 4 iterations either way.
    config = _demo_run_config(str(tmp_path / 'user.py'), demo, osp.join(ddp_data, kind), work,
                              epochs=2 if nprocs == 2 else 1)
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(_free_port()))
    proc = subprocess.run(['bash', osp.join(ROOT, 'tools', 'dist_train.sh'), config,
                           str(nprocs)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    log = proc.stdout + proc.stderr
    iters = re.findall(r'(?:Iter|Epoch)\(train\)\s*(?:\[\d+\])?\s*\[\s*(\d+)/', log)
    ckpts = sorted(f for f in os.listdir(work) if f.endswith('.pth')) if osp.isdir(work) else []
    reverted = re.search(r'(\d+) SyncBN layers converted to BatchNorm', log)
    record(record_property, f'{nprocs} x {"nccl" if CUDA else "gloo"}: exit {proc.returncode}, '
           f'{len(iters)} logged iterations, checkpoints {ckpts}'
           + (f', {reverted.group(1)} SyncBN -> BN' if reverted else ''),
           returncode=proc.returncode, iterations=len(iters), checkpoints=ckpts)
    assert proc.returncode == 0, log[-3000:]
    assert len(iters) >= 3 and ckpts, log[-3000:]
    if CUDA:
        assert not reverted, 'on GPUs SyncBN must stay SyncBN'
