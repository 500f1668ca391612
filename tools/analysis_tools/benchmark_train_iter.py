"""Work, time, speed and peak memory of one Mask R-CNN training iteration (800x1333, batch 1):
CvT-13 and CMT-S (our configs) beside MMDetection's own Swin-T Mask R-CNN, side by side.

    python tools/analysis_tools/benchmark_train_iter.py [--models cvt13 cmt_s swin_t] [--iters 2] \\
        [--threads 2] [--profile 12] [--json out.json]

Each model runs in its own subprocess, so peak memory (max RSS) is per model. The image is a
fixed random picture with five boxes and masks; backbones start from random weights (the
cost does not depend on them). The first iteration warms up and is not timed. Per model:

* ``GFLOP``: forward + backward work of one iteration, counted by
  :func:`cvt_mm.flops.count_flops` (multiply-add = 2; attention included; RoIAlign and
  other mmcv operators are not counted, they are a small share);
* ``fwd s``: data preprocessing, forward and losses; ``bwd s``: backward and the optimizer
  step (MMEngine's ``train_step`` split in two), wall time, mean over ``--iters``;
* ``GFLOP/s``: the counted work over the iteration's wall time;
* ``vs Swin-T``: this model's time and work over Swin-T's; time ratio <= work ratio means
  the model uses the machine at least as well per FLOP as Swin-T;
* ``--profile N``: the N operators with most self CPU time, forward and backward apart.
"""
import argparse
import json
import os.path as osp
import resource
import subprocess
import sys
import time

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = {
    'cvt13': ('Mask R-CNN CvT-13', 'configs/mask_rcnn_cvt13_coco.py'),
    'cmt_s': ('Mask R-CNN CMT-S', 'configs/mask_rcnn_cmt_s_coco.py'),
    'swin_t': ('Mask R-CNN Swin-T (mmdet)', 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'),
}
HEIGHT, WIDTH = 800, 1333


def build(config: str):
    from mmengine.config import Config
    from mmengine.hub import get_config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope

    # A `package::path` config lives inside the installed toolbox.
    cfg = get_config(config) if '::' in config else Config.fromfile(osp.join(REPO, config))
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    from mmdet.registry import MODELS
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    return model, build_optim_wrapper(model, cfg.optim_wrapper)


def synthetic_batch(height: int, width: int) -> dict:
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData

    # Five boxes laid out on the 800x1333 picture, scaled to the one asked for.
    boxes = torch.tensor([[100, 120, 400, 500], [600, 50, 900, 300], [700, 400, 1200, 780],
                          [50, 550, 300, 760], [450, 300, 650, 600]], dtype=torch.float32)
    boxes = (boxes * torch.tensor([width / WIDTH, height / HEIGHT] * 2)).round()
    masks = torch.zeros(len(boxes), height, width, dtype=torch.uint8)
    for i, (x0, y0, x1, y1) in enumerate(boxes.int().tolist()):
        masks[i, y0:y1, x0:x1] = 1
    sample = DetDataSample(metainfo=dict(img_shape=(height, width), ori_shape=(height, width),
                                         scale_factor=(1., 1.)))
    sample.gt_instances = InstanceData(bboxes=boxes, labels=torch.arange(len(boxes)),
                                       masks=BitmapMasks(masks.numpy(), height, width))
    image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    return dict(inputs=[image], data_samples=[sample])


def one_model(config: str, size, iters: int, threads: int, profile: int) -> dict:
    import torch

    import cvt_mm  # noqa: F401
    from cvt_mm.flops import count_flops

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, optim_wrapper = build(config)
    batch = synthetic_batch(*size)

    # MMEngine's BaseModel.train_step, split where the backward starts.
    def forward():
        with optim_wrapper.optim_context(model):
            data = model.data_preprocessor(batch, True)
            losses = model._run_forward(data, mode='loss')
        return model.parse_losses(losses)

    def backward(loss):
        optim_wrapper.update_params(loss)

    fwd, bwd = [], []
    for i in range(iters + 1):
        start = time.perf_counter()
        loss, log_vars = forward()
        middle = time.perf_counter()
        backward(loss)
        if i:  # the first iteration warms up allocators and caches
            fwd.append(middle - start)
            bwd.append(time.perf_counter() - middle)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    work = count_flops(lambda: backward(forward()[0]))
    result = dict(fwd_s=sum(fwd) / iters, bwd_s=sum(bwd) / iters, gflop=work.gflops,
                  peak_rss_gib=peak, loss=float(log_vars['loss']),
                  params_m=sum(p.numel() for p in model.parameters()) / 1e6)
    if profile:
        from benchmark_backbone import top_operators
        held = {}
        result['profile_forward'] = top_operators(lambda: held.setdefault('loss', forward()[0]),
                                                  profile)
        result['profile_backward'] = top_operators(lambda: backward(held.pop('loss')), profile)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', choices=tuple(CONFIGS), default=list(CONFIGS))
    parser.add_argument('--size', type=int, nargs=2, default=(HEIGHT, WIDTH),
                        metavar=('H', 'W'), help='image size (default: 800 1333)')
    parser.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    parser.add_argument('--iters', type=int, default=2, help='timed iterations (after 1 warm-up)')
    parser.add_argument('--profile', type=int, default=0, metavar='N',
                        help='print the N operators with the most self CPU time per model')
    parser.add_argument('--no-thp', action='store_true',
                        help='without THP_MEM_ALLOC_ENABLE=1 (huge pages; tools/train.py sets it)')
    parser.add_argument('--json', help='also write the results to this file')
    parser.add_argument('--one', help=argparse.SUPPRESS)  # internal: run one config, print JSON
    args = parser.parse_args(argv)
    if args.threads < 1 or args.iters < 1 or args.profile < 0 or min(args.size) < 64:
        parser.error('--threads and --iters must be >= 1, --profile >= 0, --size >= 64')
    if args.one:
        print(json.dumps(one_model(args.one, args.size, args.iters, args.threads,
                                   args.profile)))
        return 0
    from benchmark_backbone import case_env, machine_rates
    rates = machine_rates(args.threads)
    print(f'this machine now: fp32 GEMM {rates["gemm_gflops_per_s"]:.0f} GFLOP/s, memory copy '
          f'{rates["copy_gb_per_s"]:.1f} GB/s; THP_MEM_ALLOC_ENABLE={0 if args.no_thp else 1}')
    print(f'one training iteration, batch 1, {args.size[0]}x{args.size[1]}, {args.threads} '
          'CPU threads, '
          f'mean of {args.iters} after a warm-up')
    results = {}
    for key in args.models:
        name, config = CONFIGS[key]
        out = subprocess.run([sys.executable, osp.abspath(__file__), '--one', config,
                              '--size', *map(str, args.size), '--iters', str(args.iters),
                              '--threads', str(args.threads),
                              '--profile', str(args.profile)], capture_output=True, text=True,
                             env=case_env(args.no_thp))
        if out.returncode:
            raise RuntimeError(f'{config} failed:\n{out.stderr[-3000:]}')
        results[key] = r = json.loads(out.stdout.strip().splitlines()[-1])
        r.update(name=name, config=config, wall_s=r['fwd_s'] + r['bwd_s'])
        r['gflops_per_s'] = r['gflop'] / r['wall_s']
        for part in ('forward', 'backward'):
            if r.get(f'profile_{part}'):
                print(f'\n{name}: top operators, {part}\n{r[f"profile_{part}"]}', flush=True)
    print(f'\n{"model":27s} {"params":>7s} {"GFLOP":>7s} {"fwd s":>6s} {"bwd s":>6s} '
          f'{"wall s":>6s} {"GFLOP/s":>7s} {"peak RSS":>9s}  vs Swin-T: time, work')
    ref = results.get('swin_t')
    for key, r in results.items():
        line = (f'{r["name"]:27s} {r["params_m"]:6.1f}M {r["gflop"]:7.0f} {r["fwd_s"]:6.1f} '
                f'{r["bwd_s"]:6.1f} {r["wall_s"]:6.1f} {r["gflops_per_s"]:7.1f} '
                f'{r["peak_rss_gib"]:6.2f}GiB')
        if ref and key != 'swin_t':
            r['time_ratio'] = r['wall_s'] / ref['wall_s']
            r['work_ratio'] = r['gflop'] / ref['gflop']
            line += f'  {r["time_ratio"]:.2f}, {r["work_ratio"]:.2f}'
        print(line)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(size=args.size, threads=args.threads, iters=args.iters,
                           machine=rates, results=results), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
