"""Check a CUDA machine end to end in one command, or rehearse the same checks on a CPU.

    make gpu-check                          # with this project's .venv
    make gpu-check WHEELHOUSE=wheelhouse    # an offline GPU node with its own CUDA torch
    python tools/analysis_tools/gpu_check.py [--device cpu] [--out outputs/gpu_check.json]

It prints one table and writes it as JSON. Rows (CUDA-only rows read ``skipped: no CUDA`` on a
machine without CUDA, where the rest runs at small sizes):

* ``environment``, ``mmcv build``: versions, GPU, whether mmcv was compiled with CUDA ops;
* ``mmcv ops``: RoIAlign (forward and backward) and NMS on CUDA against their CPU results;
* ``parity``: CvT-13 and CMT-S forward + backward on the device against CPU fp32, in fp32,
  fp16 autocast and bf16 autocast (relative L2 error of the outputs and of all gradients);
* ``sdpa``: which ``scaled_dot_product_attention`` kernel each attention call of CvT-13 and
  CMT-S runs at 800x1333 (flash / mem-efficient / cudnn / math), in training and inference;
  the math fallback at that size is a failure on CUDA;
* ``train step``: Mask R-CNN CvT-13 and MMDetection's Swin-T Mask R-CNN at 1333x800 and UperNet
  CvT-13 at 512x512, batch 2, AMP: median step time after warm-up, peak CUDA memory, ratio;
* ``ddp``: ``tools/dist_train.sh`` for Mask R-CNN CvT-13 and UperNet CvT-13 on generated data,
  at least 3 iterations, NCCL on min(2, GPUs) GPUs (without CUDA: Mask R-CNN only, gloo on 2
  CPU processes; tests/test_engine/test_distributed.py runs the other gloo cases).

The exit status is 1 when a row failed. Nothing here changes driver or GPU settings; the TF32
switches of PyTorch are turned off only around the fp32 parity check and restored.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import os.path as osp
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
NO_CUDA = 'skipped: no CUDA'
PASS, FAIL, WARN, INFO = 'pass', 'fail', 'warn', 'info'

# Relative L2 error against CPU fp32 (outputs; all parameter and input gradients together).
# fp32 runs with TF32 off, so only summation order differs. Autocast rounds to fp16 (10-bit
# mantissa) or bf16 (7-bit); CPU autocast measured fp16 9e-4-4e-3 and bf16 7e-3-3e-2 on both
# outputs and gradients, and CUDA autocasts more ops, hence some room. A wrong kernel or a
# broken cast gives errors of order 1.
TOLERANCES = {
    'fp32': (1e-4, 1e-3),
    'fp16': (1e-2, 2e-2),
    'bf16': (6e-2, 1e-1),
}
AUTOCAST_DTYPES = {'fp32': None, 'fp16': torch.float16, 'bf16': torch.bfloat16}
BACKBONES = {
    'CvT-13': dict(type='CvT', arch='13'),
    'CMT-S': dict(type='CMT', arch='s'),
}
TRAIN_CONFIGS = {
    'Mask R-CNN CvT-13': 'configs/mask_rcnn_cvt13_coco.py',
    'Mask R-CNN Swin-T (mmdet)': 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py',
    'UperNet CvT-13': 'configs/upernet_cvt13_ade20k.py',
}
# The demo's configs (the real ones, sized for small data) on generated data.
DDP_CONFIGS = {
    'Mask R-CNN CvT-13': ('configs/demo/mask_rcnn_cvt13_demo.py', 'coco'),
    'UperNet CvT-13': ('configs/demo/upernet_cvt13_demo.py', 'ade'),
}
SDPA_KERNELS = {
    'aten::_scaled_dot_product_flash_attention': 'flash',
    'aten::_scaled_dot_product_efficient_attention': 'mem-efficient',
    'aten::_scaled_dot_product_cudnn_attention': 'cudnn',
    'aten::_scaled_dot_product_flash_attention_for_cpu': 'flash (CPU)',
    'aten::_scaled_dot_product_attention_math': 'math',
}


@dataclass
class Plan:
    """Sizes of one run: the real ones on CUDA, small ones for the CPU rehearsal."""
    device: str
    parity_shape: tuple = (2, 3, 224, 320)
    sdpa_shape: tuple = (2, 3, 800, 1333)
    det_shape: tuple = (800, 1333)
    seg_shape: tuple = (512, 512)
    warmup_steps: int = 2
    timed_steps: int = 5
    amp: bool = True
    ddp_image_size: int = 128
    # The CPU rehearsal runs one DDP row: the gloo runs of every config kind are
    # tests/test_engine/test_distributed.py's, and each costs half a minute of CI.
    ddp_configs: tuple = tuple(DDP_CONFIGS)

    @classmethod
    def for_device(cls, device: str) -> 'Plan':
        if device == 'cuda':
            return cls(device)
        return cls(device, parity_shape=(2, 3, 64, 96), sdpa_shape=(1, 3, 96, 160),
                   det_shape=(96, 128), seg_shape=(64, 64), warmup_steps=1, timed_steps=1,
                   amp=False, ddp_image_size=96, ddp_configs=('Mask R-CNN CvT-13', ))


@dataclass
class CheckRow:
    check: str
    subject: str
    status: str
    result: str = ''
    detail: dict = field(default_factory=dict)
    seconds: float = 0.0


class Report:
    def __init__(self):
        self.rows: list = []

    def add(self, check, subject, status, result='', seconds=0.0, **detail) -> CheckRow:
        row = CheckRow(check, subject, status, result, detail, round(seconds, 2))
        self.rows.append(row)
        print(f'[{status:^7s}] {check}: {subject}: {result}', flush=True)
        return row

    def run(self, check, subject, fn, *args, **kwargs):
        """Run one check; an exception becomes a failed row, so the other checks still run."""
        start = time.perf_counter()
        try:
            status, result, detail = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (any failure is a result of the check)
            status, result, detail = FAIL, f'{type(e).__name__}: {e}'[:300], {}
        return self.add(check, subject, status, result, time.perf_counter() - start, **detail)

    @property
    def failed(self) -> bool:
        return any(row.status == FAIL for row in self.rows)

    def table(self) -> str:
        heads = ('check', 'subject', 'status', 'seconds', 'result')
        cells = [(r.check, r.subject, r.status, f'{r.seconds:.1f}', r.result) for r in self.rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads[:-1])]
        lines = ['| ' + ' | '.join(h.ljust(w) for h, w in zip(heads, widths + [0])) + ' |',
                 '|' + '|'.join('-' * (w + 2) for w in widths + [6]) + '|']
        lines += ['| ' + ' | '.join(c.ljust(w) for c, w in zip(cell, widths + [0])) + ' |'
                  for cell in cells]
        return '\n'.join(lines)


# ------------------------------------------------------------------------------- checks
def check_environment(plan: Plan, setup_seconds):
    import mmcv
    import mmdet
    import mmengine
    import mmpretrain
    import mmseg
    versions = dict(python=platform.python_version(), torch=torch.__version__,
                    torch_cuda=torch.version.cuda, mmcv=mmcv.__version__,
                    mmengine=mmengine.__version__, mmdet=mmdet.__version__,
                    mmseg=mmseg.__version__, mmpretrain=mmpretrain.__version__)
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if plan.device == 'cuda' else []
    result = (f'torch {torch.__version__} (CUDA {torch.version.cuda}), python '
              f'{versions["python"]}, '
              + (f'{len(gpus)} x {", ".join(sorted(set(gpus)))}' if gpus else 'no GPU')
              + f', {os.cpu_count()} CPUs')
    if setup_seconds is not None:
        result += f', setup {setup_seconds:.0f} s'
    return INFO, result, dict(versions=versions, gpus=gpus, setup_seconds=setup_seconds)


def check_mmcv_build(plan: Plan):
    from mmcv.ops import get_compiler_version, get_compiling_cuda_version
    cuda = get_compiling_cuda_version()
    result = f'ops compiled with {get_compiler_version()}, CUDA {cuda}'
    if plan.device != 'cuda':
        return INFO, result, {}
    ok = cuda not in ('not available', None, '')
    if not ok:
        result += ': no CUDA ops (rebuild mmcv with FORCE_CUDA=1)'
    return (PASS if ok else FAIL), result, {}


def _mmcv_ops_outputs(device: str):
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
    return pooled.detach().cpu(), feats.grad.cpu(), keep.cpu()


def check_mmcv_ops(plan: Plan):
    pooled, grad, keep = _mmcv_ops_outputs('cpu')
    if plan.device != 'cuda':
        ok = bool(torch.isfinite(pooled).all() and torch.isfinite(grad).all() and len(keep))
        return (PASS if ok else FAIL), f'CPU ops ran: RoIAlign fwd/bwd, NMS kept {len(keep)}', {}
    c_pooled, c_grad, c_keep = _mmcv_ops_outputs('cuda')
    d_fwd = (c_pooled - pooled).abs().max().item()
    d_bwd = (c_grad - grad).abs().max().item()
    same_keep = torch.equal(c_keep.sort().values, keep.sort().values)
    ok = d_fwd < 1e-4 and d_bwd < 1e-4 and same_keep
    return (PASS if ok else FAIL), (f'RoIAlign |fwd diff| {d_fwd:.1e}, |bwd diff| {d_bwd:.1e}; '
                                    f'NMS keeps the same {len(keep)} boxes: {same_keep}'), \
        dict(roi_align_fwd=d_fwd, roi_align_bwd=d_bwd, nms_same=same_keep)


def _build_backbone(name: str):
    from cvt_mm.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(dict(BACKBONES[name]))
    model.init_weights()
    return model.eval()  # BN on running statistics and no drop path: a deterministic function


def _forward_backward(model, x, weights, device, precision):
    model = model.to(device)
    x = x.detach().clone().to(device).requires_grad_()
    dtype = AUTOCAST_DTYPES[precision]
    ctx = torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()
    with ctx:
        outs = model(x)
    outs = [o.float() for o in outs]
    sum((o * w.to(device)).sum() for o, w in zip(outs, weights)).backward()
    grads = torch.cat([p.grad.float().flatten().cpu() for p in model.parameters()
                       if p.grad is not None] + [x.grad.float().flatten().cpu()])
    model.zero_grad(set_to_none=True)
    return [o.detach().cpu() for o in outs], grads


@contextlib.contextmanager
def _no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def check_parity(plan: Plan, name: str, reference: dict, precision: str):
    """Device run of one precision against the CPU fp32 run in ``reference``."""
    model = _build_backbone(name)
    model.load_state_dict(reference['state'])
    with _no_tf32() if precision == 'fp32' else contextlib.nullcontext():
        outs, grads = _forward_backward(model, reference['x'], reference['weights'],
                                        plan.device, precision)
    if plan.device == 'cuda':
        torch.cuda.synchronize()
    out_err = max(_rel(o, r) for o, r in zip(outs, reference['outs']))
    grad_err = _rel(grads, reference['grads'])
    tol_out, tol_grad = TOLERANCES[precision]
    finite = all(torch.isfinite(o).all() for o in outs) and bool(torch.isfinite(grads).all())
    ok = finite and out_err <= tol_out and grad_err <= tol_grad
    return (PASS if ok else FAIL), (f'rel. error out {out_err:.1e} (tol {tol_out:.0e}), '
                                    f'grads {grad_err:.1e} (tol {tol_grad:.0e})'), \
        dict(out_rel_error=out_err, grad_rel_error=grad_err, tolerance=[tol_out, tol_grad],
             shape=list(plan.parity_shape))


def parity_reference(plan: Plan, name: str) -> dict:
    model = _build_backbone(name)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(plan.parity_shape, generator=gen)
    with torch.no_grad():
        shapes = [o.shape for o in model(x)]
    weights = [torch.randn(s, generator=gen) for s in shapes]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    outs, grads = _forward_backward(model, x, weights, 'cpu', 'fp32')
    return dict(x=x, weights=weights, state=state, outs=outs, grads=grads)


def _attention_kernels(model, x, train: bool, precision: str, device: str) -> dict:
    """{stage: {kernel: calls}} of one forward, read from the profiler's op events, with each
    stage's calls told apart by a record_function label around the stage."""
    from torch.profiler import ProfilerActivity, profile, record_function
    handles, active = [], {}
    for i, stage in enumerate(model.stages):
        def enter(module, args, i=i):
            active[i] = record_function(f'gpu_check_stage{i}')
            active[i].__enter__()

        def leave(module, args, output, i=i):
            active.pop(i).__exit__(None, None, None)
        handles += [stage.register_forward_pre_hook(enter), stage.register_forward_hook(leave)]
    dtype = AUTOCAST_DTYPES[precision]
    model.train(train)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof, \
                (torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext()), \
                (contextlib.nullcontext() if train else torch.no_grad()):
            model(x)
    finally:
        for h in handles:
            h.remove()
    counts: dict = {}
    for event in prof.events():
        kernel = SDPA_KERNELS.get(event.name)
        if kernel is None:
            continue
        parent, stage = event.cpu_parent, '?'
        while parent is not None:
            match = re.fullmatch(r'gpu_check_stage(\d+)', parent.name)
            if match:
                stage = f's{match.group(1)}'
                break
            parent = parent.cpu_parent
        counts.setdefault(stage, {}).setdefault(kernel, 0)
        counts[stage][kernel] += 1
    return counts


def check_sdpa(plan: Plan, name: str, model, train: bool, precision: str):
    x = torch.randn(plan.sdpa_shape, device=plan.device)
    counts = _attention_kernels(model, x, train, precision, plan.device)
    if plan.device == 'cuda':
        torch.cuda.synchronize()
    total: dict = {}
    for per_stage in counts.values():
        for kernel, n in per_stage.items():
            total[kernel] = total.get(kernel, 0) + n
    stages = '; '.join(f'{s}: ' + ', '.join(f'{k} x{n}' for k, n in sorted(c.items()))
                       for s, c in sorted(counts.items()))
    if not total:
        return FAIL, 'no scaled_dot_product_attention call was seen', {}
    math = total.get('math', 0)
    status = PASS if not math else (FAIL if plan.device == 'cuda' else WARN)
    return status, stages, dict(kernels=counts, shape=list(plan.sdpa_shape))


def check_train_step(plan: Plan, config: str):
    from mmengine.optim import build_optim_wrapper

    from cvt_mm.benchmark import peak_memory_gib, time_steps
    from cvt_mm.builders import build_model_from_config, load_config, synthetic_batch
    cfg = load_config(config if '::' in config else osp.join(ROOT, config))
    torch.manual_seed(0)
    model = build_model_from_config(cfg, device=plan.device)
    seg = cfg.get('default_scope') == 'mmseg'
    height, width = plan.seg_shape if seg else plan.det_shape
    if seg:
        model.data_preprocessor.size = (height, width)
    optim_cfg = cfg.optim_wrapper.copy()
    if plan.amp:
        optim_cfg.update(type='AmpOptimWrapper', loss_scale='dynamic')
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    batch = synthetic_batch(model, batch_size=2, height=height, width=width)
    cuda = plan.device == 'cuda'
    losses = []

    def step():
        losses.append(float(model.train_step(batch, optim_wrapper)['loss'].detach()))

    time_steps(step, 0, plan.warmup_steps, plan.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, 0, plan.timed_steps, plan.device)
    median = statistics.median(times)
    peak = peak_memory_gib(plan.device) if cuda else None
    finite = all(map(lambda v: v == v and abs(v) != float('inf'), losses))
    result = (f'{height}x{width} batch 2{" AMP" if plan.amp else ""}: median {median:.3f} s of '
              f'{len(times)} steps' + (f', peak {peak:.2f} GiB' if peak is not None else ''))
    model = optim_wrapper = None  # free the memory before the next check
    if cuda:
        torch.cuda.empty_cache()
    return (PASS if finite else FAIL), result, dict(median_s=median, times_s=times,
                                                   peak_gib=peak, losses=losses,
                                                   shape=[height, width])


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
    with open(path, 'w') as f:
        f.write(f"_base_ = {osp.join(ROOT, demo)!r}\n"
                f"data_root = {data_root!r}\n"
                "model = dict(backbone=dict(init_cfg=None))\n"
                "train_dataloader = dict(batch_size=2, dataset=dict(data_root=data_root))\n"
                "val_dataloader = dict(dataset=dict(data_root=data_root))\n"
                "test_dataloader = val_dataloader\n" + schedule + f"work_dir = {work!r}\n")
    return path


def check_ddp(plan: Plan, demo: str, kind: str, workdir: str):
    nprocs = min(2, torch.cuda.device_count()) if plan.device == 'cuda' else 2
    data = osp.join(workdir, 'data')
    if not osp.isdir(data):
        make_data = osp.join(ROOT, 'tools', 'misc', 'make_demo_data.py')
        subprocess.run([sys.executable, make_data, '--out', data, '--size',
                        str(plan.ddp_image_size), '--coco-train', '8', '--coco-val', '2',
                        '--ade-train', '8', '--ade-val', '2', '--seed', '3'],
                       check=True, capture_output=True, cwd=ROOT)
    work = osp.join(workdir, f'work_{kind}')
    # 8 images, batch 2 per process: 4 iterations either way.
    config = _demo_run_config(osp.join(workdir, f'user_{kind}.py'), demo, osp.join(data, kind),
                              work, epochs=2 if nprocs == 2 else 1)
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(_free_port()))
    proc = subprocess.run(['bash', osp.join(ROOT, 'tools', 'dist_train.sh'), config,
                           str(nprocs)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    log = proc.stdout + proc.stderr
    iters = re.findall(r'(?:Iter|Epoch)\(train\)\s*(?:\[\d+\])?\s*\[\s*(\d+)/', log)
    ckpts = sorted(f for f in os.listdir(work) if f.endswith('.pth')) if osp.isdir(work) else []
    backend = 'nccl' if plan.device == 'cuda' else 'gloo'
    reverted = re.search(r'(\d+) SyncBN layers converted to BatchNorm', log)
    result = (f'{nprocs} x {backend}: exit {proc.returncode}, {len(iters)} logged iterations, '
              f'checkpoints {ckpts}')
    if reverted:
        result += f', {reverted.group(1)} SyncBN -> BN'
    ok = proc.returncode == 0 and len(iters) >= 3 and bool(ckpts)
    if plan.device == 'cuda' and reverted:
        ok = False  # on GPUs SyncBN must stay SyncBN
    detail = dict(returncode=proc.returncode, iterations=len(iters), checkpoints=ckpts)
    if not ok:
        detail['log_tail'] = log[-3000:]
    return (PASS if ok else FAIL), result, detail


# ------------------------------------------------------------------------------- main
def run_all(plan: Plan, setup_seconds=None, workdir=None) -> Report:
    import cvt_mm  # noqa: F401  (registers the backbones and the CPU DDP wrapper)
    report = Report()
    cuda = plan.device == 'cuda'
    report.run('environment', plan.device, check_environment, plan, setup_seconds)
    report.run('mmcv build', 'mmcv.ops', check_mmcv_build, plan)
    if cuda:
        report.run('mmcv ops', 'RoIAlign, NMS: CUDA vs CPU', check_mmcv_ops, plan)
    else:
        report.run('mmcv ops', 'RoIAlign, NMS on CPU', check_mmcv_ops, plan)
        report.add('mmcv ops', 'RoIAlign, NMS: CUDA vs CPU', NO_CUDA)

    for name in BACKBONES:
        reference = parity_reference(plan, name)
        for precision in TOLERANCES:
            report.run('parity', f'{name} {precision} {plan.device} vs CPU fp32', check_parity,
                       plan, name, reference, precision)
        del reference

    for name in BACKBONES:
        model = _build_backbone(name).to(plan.device)
        for train in (True, False):
            for precision in ('fp32', 'fp16', 'bf16'):
                mode = 'train' if train else 'eval'
                subject = (f'{name} {"x".join(map(str, plan.sdpa_shape[2:]))} {mode} '
                           f'{precision}')
                if precision != 'fp32' and not cuda:
                    # Which kernel AMP picks is a CUDA question; CPU autocast is slow.
                    report.add('sdpa', subject, NO_CUDA)
                    continue
                report.run('sdpa', subject, check_sdpa, plan, name, model, train, precision)
        del model

    rows = {}
    for name, config in TRAIN_CONFIGS.items():
        rows[name] = report.run('train step', name, check_train_step, plan, config)
    cvt, swin = rows['Mask R-CNN CvT-13'], rows['Mask R-CNN Swin-T (mmdet)']
    if cvt.status == PASS and swin.status == PASS:
        ratio = cvt.detail['median_s'] / swin.detail['median_s']
        result = f'CvT-13 / Swin-T time {ratio:.2f}'
        detail = dict(time_ratio=ratio)
        if cuda:
            mem_ratio = cvt.detail['peak_gib'] / swin.detail['peak_gib']
            result += f', peak memory {mem_ratio:.2f}'
            detail['memory_ratio'] = mem_ratio
        report.add('train step', 'Mask R-CNN CvT-13 / Swin-T', INFO, result, **detail)

    temporary = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix='gpu_check_')
    ddp_rows = [report.run('ddp', f'{name} (tools/dist_train.sh)', check_ddp, plan,
                           *DDP_CONFIGS[name], workdir) for name in plan.ddp_configs]
    # Each run leaves about 0.5 GB of checkpoints: a temporary folder goes unless a run
    # failed, when its logs are what the user needs.
    if temporary and all(r.status == PASS for r in ddp_rows):
        shutil.rmtree(workdir, ignore_errors=True)
    elif ddp_rows:
        print(f'gpu_check: the DDP runs\' logs and checkpoints are in {workdir}', flush=True)
    return report


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', choices=['auto', 'cuda', 'cpu'], default='auto',
                        help='auto: cuda when torch sees a GPU, else a CPU rehearsal')
    parser.add_argument('--out', default=osp.join('outputs', 'gpu_check.json'),
                        help='where the JSON report goes (default: %(default)s)')
    parser.add_argument('--setup-seconds', type=float, default=None,
                        help='time the environment setup took, to show in the report')
    parser.add_argument('--workdir', help='folder for the DDP runs (default: a temporary one)')
    args = parser.parse_args(argv)
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: torch sees no CUDA device '
                     f'(torch {torch.__version__}, built for CUDA {torch.version.cuda})')
    if args.device == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    # The current MMEngine logger; at WARNING the model builds do not drown the table in
    # per-parameter INFO lines (the DDP runs keep their own logs).
    from mmengine.logging import MMLogger
    MMLogger.get_instance('gpu_check', log_level='WARNING')
    plan = Plan.for_device(args.device)
    print(f'gpu_check: {"CUDA" if plan.device == "cuda" else "CPU rehearsal (no CUDA)"}, '
          f'{json.dumps(asdict(plan))}', flush=True)
    report = run_all(plan, args.setup_seconds, args.workdir)
    total = time.perf_counter() - start
    print()
    print(report.table())
    summary = (f'{sum(r.status == PASS for r in report.rows)} passed, '
               f'{sum(r.status == FAIL for r in report.rows)} failed, '
               f'{sum(r.status == WARN for r in report.rows)} warnings, '
               f'{sum(r.status.startswith("skipped") for r in report.rows)} skipped; '
               f'checks took {total:.0f} s')
    if args.setup_seconds is not None:
        summary += f', setup {args.setup_seconds:.0f} s'
    print(summary)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(dict(plan=asdict(plan), rows=[asdict(r) for r in report.rows],
                       checks_seconds=total, setup_seconds=args.setup_seconds,
                       summary=summary), f, indent=1)
    print(f'report: {args.out}')
    return 1 if report.failed else 0


if __name__ == '__main__':
    sys.exit(main())
