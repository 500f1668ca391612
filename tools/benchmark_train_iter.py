"""CPU time and peak memory of one Mask R-CNN training iteration at 800x1333, batch 1:
CvT-13 (configs/mask_rcnn_cvt13_coco.py) beside MMDetection's own Swin-T Mask R-CNN.

    python tools/benchmark_train_iter.py [--threads 2] [--iters 2]

Each model runs in its own subprocess so peak memory (max RSS) is per model. The image is a
fixed random picture with five boxes and masks; backbones start from random weights (the
cost does not depend on the weights). The first iteration warms up and is not timed.
"""
import argparse
import json
import resource
import subprocess
import sys
import time

CONFIGS = {
    'Mask R-CNN CvT-13': 'configs/mask_rcnn_cvt13_coco.py',
    'Mask R-CNN Swin-T (mmdet)': 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py',
}
HEIGHT, WIDTH = 800, 1333


def one_model(config: str, iters: int, threads: int) -> dict:
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.config import Config
    from mmengine.hub import get_config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmengine.structures import InstanceData

    import cvt_mm  # noqa: F401

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    # A `package::path` config lives inside the installed toolbox.
    cfg = get_config(config) if '::' in config else Config.fromfile(config)
    init_default_scope('mmdet')
    cfg.model.backbone.init_cfg = None
    from mmdet.registry import MODELS
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)

    boxes = torch.tensor([[100, 120, 400, 500], [600, 50, 900, 300], [700, 400, 1200, 780],
                          [50, 550, 300, 760], [450, 300, 650, 600]], dtype=torch.float32)
    masks = torch.zeros(len(boxes), HEIGHT, WIDTH, dtype=torch.uint8)
    for i, (x0, y0, x1, y1) in enumerate(boxes.int().tolist()):
        masks[i, y0:y1, x0:x1] = 1
    sample = DetDataSample(metainfo=dict(img_shape=(HEIGHT, WIDTH), ori_shape=(HEIGHT, WIDTH),
                                         scale_factor=(1., 1.)))
    sample.gt_instances = InstanceData(bboxes=boxes, labels=torch.arange(len(boxes)),
                                       masks=BitmapMasks(masks.numpy(), HEIGHT, WIDTH))
    image = torch.randint(0, 256, (3, HEIGHT, WIDTH), dtype=torch.uint8)
    batch = dict(inputs=[image], data_samples=[sample])

    cpu, wall = [], []
    for i in range(iters + 1):
        c0, w0 = time.process_time(), time.perf_counter()
        losses = model.train_step(batch, optim_wrapper)
        if i:  # the first iteration warms up allocators and caches
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    params = sum(p.numel() for p in model.parameters())
    return dict(cpu_s=sum(cpu) / len(cpu), wall_s=sum(wall) / len(wall),
                peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
                params_m=params / 1e6, loss=float(losses['loss']))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    parser.add_argument('--iters', type=int, default=2, help='timed iterations (after 1 warm-up)')
    parser.add_argument('--one', help=argparse.SUPPRESS)  # internal: run one config, print JSON
    args = parser.parse_args()
    if args.threads < 1 or args.iters < 1:
        raise ValueError('--threads and --iters must be >= 1')
    if args.one:
        print(json.dumps(one_model(args.one, args.iters, args.threads)))
        return
    print(f'one training iteration, batch 1, {HEIGHT}x{WIDTH}, {args.threads} CPU threads, '
          f'mean of {args.iters} after a warm-up')
    print(f'{"model":28s} {"params":>8s} {"CPU s":>8s} {"wall s":>8s} {"peak RSS":>9s}')
    for name, config in CONFIGS.items():
        out = subprocess.run([sys.executable, __file__, '--one', config, '--iters',
                              str(args.iters), '--threads', str(args.threads)],
                             capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f'{config} failed:\n{out.stderr[-3000:]}')
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f'{name:28s} {r["params_m"]:7.1f}M {r["cpu_s"]:8.1f} {r["wall_s"]:8.1f} '
              f'{r["peak_rss_gib"]:7.2f}GiB')


if __name__ == '__main__':
    main()
