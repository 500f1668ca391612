"""CPU time per training iteration of the ImageNet classification configs.

    python tools/analysis_tools/benchmark_cls_iter.py configs/imagenet_cvt13_300e_in1k.py \
        configs/imagenet_cmt_s_300e_in1k.py --batch-size 8 --iters 5

For each config, builds the classifier, its data preprocessor with the batch augmentations
(Mixup / CutMix), the loss and the optimizer wrapper exactly as the config defines them, and
times ``model.train_step`` (preprocessing, forward, loss, backward, AdamW step) on a synthetic
batch at the config's training resolution. Image decoding and the per-image augmentations run
in dataloader workers in a real run and are not included.
"""
import argparse
import os.path as osp
import statistics
import time

import torch

import cvt_mm  # noqa: F401  (registers CvT / CMT)


def train_resolution(cfg) -> int:
    for t in cfg.train_dataloader.dataset.pipeline:
        if t['type'] == 'RandomResizedCrop':
            return int(t['scale'])
    raise ValueError('the config has no RandomResizedCrop in its training pipeline; '
                     'pass --size')


def time_train_steps(config: str, batch_size: int, size, warmup: int, iters: int) -> dict:
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    from mmpretrain.structures import DataSample

    if batch_size < 1 or iters < 1 or warmup < 0:
        raise ValueError(f'need batch_size >= 1, iters >= 1, warmup >= 0; got {batch_size}, '
                         f'{iters}, {warmup}')
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    size = size or train_resolution(cfg)
    cfg.model.data_preprocessor = cfg.data_preprocessor
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    num_classes = cfg.data_preprocessor.num_classes

    generator = torch.Generator().manual_seed(0)
    data = dict(
        inputs=[torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=generator)
                for _ in range(batch_size)],
        data_samples=[DataSample().set_gt_label(i % num_classes) for i in range(batch_size)])
    times = []
    for step in range(warmup + iters):
        start = time.perf_counter()
        losses = model.train_step(data, optim_wrapper)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    loss = sum(v.item() for k, v in losses.items() if 'loss' in k)
    return dict(size=size, median=statistics.median(times), min=min(times), max=max(times),
                loss=loss)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('configs', nargs='+', help='classification config files')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--size', type=int, help='input size (default: the config\'s crop)')
    parser.add_argument('--warmup', type=int, default=1, help='untimed iterations first')
    parser.add_argument('--iters', type=int, default=5, help='timed iterations')
    args = parser.parse_args(argv)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} CPU threads')
    for config in args.configs:
        r = time_train_steps(config, args.batch_size, args.size, args.warmup, args.iters)
        print(f'{osp.basename(config)}: batch {args.batch_size} x {r["size"]}x{r["size"]}: '
              f'{r["median"]:.2f} s/iter median of {args.iters} '
              f'(min {r["min"]:.2f}, max {r["max"]:.2f}); last loss {r["loss"]:.3f}')


if __name__ == '__main__':
    main()
