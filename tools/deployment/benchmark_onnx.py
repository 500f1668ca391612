"""CPU latency of ONNX Runtime beside PyTorch for exported backbones, measured in one run.

    python tools/deployment/benchmark_onnx.py [--configs A.py B.py] [--shape 800 1333]
        [--repeat 5] [--threads 2]

For each config (default: the CvT-13 and CMT-S Mask R-CNN configs) the backbone (with its
output norms, as the detector runs it) is exported by ``export_onnx.py`` with dynamic height
and width (at the small ``--export-shape``), then one image of ``--shape`` goes through
PyTorch (eval mode, ``torch.no_grad()``, CMT's resized bias cached as in eager inference) and
through ONNX Runtime's CPU provider (the graph computes the bias resize on every run), each
with ``--threads`` intra-op threads: one warm-up run each, then ``--repeat`` timed runs of
each, alternating between the two so that load from other processes falls on both alike.
Each config runs in its own subprocess so that its peak memory (RSS) is its own; PyTorch's
peak is read after its warm-up, before ONNX Runtime loads the graph, and the peak at the end
is the larger of the two.

Prints one table: median and best seconds per runtime, their ratio, the largest relative
difference of the outputs (as export_onnx.py defines it) and peak RSS, with the load average
before and after (other processes on the machine slow both runtimes alike).
Random weights: latency does not depend on them. Needs ``pip install -e .[deploy]``.
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIGS = ['configs/mask_rcnn_cvt13_coco.py', 'configs/mask_rcnn_cmt_s_coco.py']


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


def measure_one(config: str, shape, export_shape, repeat: int, threads: int,
                work_dir: str) -> dict:
    """Export ``config``'s backbone and time both runtimes on one random image (see the
    module doc); the numbers as a dict."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from cvt_mm.apis.deployment import build_part, export_onnx

    torch.set_num_threads(threads)
    module, _ = build_part(config, 'backbone')
    path = osp.join(work_dir, osp.splitext(osp.basename(config))[0] + '_backbone.onnx')
    exported = export_onnx(module, path, export_shape, dynamic=True)

    image = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = module(image)  # PyTorch's warm-up (CMT: fills the bias cache)
    torch_rss = _peak_rss_gib()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    feed = {session.get_inputs()[0].name: image.numpy()}
    got = session.run(None, feed)  # ONNX Runtime's warm-up
    # Alternating, so that load from other processes falls on both runtimes alike.
    torch_times, ort_times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        with torch.no_grad():
            module(image)
        torch_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        session.run(None, feed)
        ort_times.append(time.perf_counter() - start)
    rel = max(float(np.abs(o - e.numpy()).max() / np.abs(e.numpy()).max())
              for o, e in zip(got, expected))
    return dict(config=config, export_s=exported['seconds'],
                torch_median=statistics.median(torch_times), torch_best=min(torch_times),
                ort_median=statistics.median(ort_times), ort_best=min(ort_times),
                torch_times=torch_times, ort_times=ort_times, max_rel=rel,
                torch_rss_gib=torch_rss, peak_rss_gib=_peak_rss_gib())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='ONNX Runtime vs PyTorch CPU latency of '
                                     'exported backbones')
    parser.add_argument('--configs', nargs='+', default=DEFAULT_CONFIGS,
                        help='configs whose backbones to measure (default: CvT-13, CMT-S)')
    parser.add_argument('--shape', type=int, nargs=2, default=[800, 1333], metavar=('H', 'W'),
                        help='image size to time (default 800 1333)')
    parser.add_argument('--export-shape', type=int, nargs=2, default=[320, 480],
                        metavar=('H', 'W'), help='example size of the dynamic export')
    parser.add_argument('--repeat', type=int, default=5, help='timed runs per runtime')
    parser.add_argument('--threads', type=int, default=2, help='intra-op threads of both')
    parser.add_argument('--json', help='also write the rows to this file')
    parser.add_argument('--one', help=argparse.SUPPRESS)  # the per-config subprocess
    parser.add_argument('--work-dir', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        parser.error(f'--repeat and --threads must be >= 1, got {args.repeat}, {args.threads}')
    for config in args.configs:
        if not osp.isfile(config):
            parser.error(f'config file not found: {config}')
    if min(args.shape + args.export_shape) < 64:
        parser.error('--shape and --export-shape sides must be >= 64 (the dynamic range)')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.one:
        row = measure_one(args.one, args.shape, args.export_shape, args.repeat, args.threads,
                          args.work_dir)
        print('RESULT ' + json.dumps(row))
        return 0
    from cvt_mm.apis.deployment import require_deploy_packages
    require_deploy_packages()
    import onnxruntime
    import torch

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as work_dir:
        for config in args.configs:
            cmd = [sys.executable, osp.abspath(__file__), '--one', config, '--work-dir',
                   work_dir, '--shape', *map(str, args.shape), '--export-shape',
                   *map(str, args.export_shape), '--repeat', str(args.repeat), '--threads',
                   str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            result = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')]
            if proc.returncode or not result:
                print(f'{config}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}',
                      file=sys.stderr)
                return 1
            rows.append(json.loads(result[0][len('RESULT '):]))
    load_after = os.getloadavg()

    h, w = args.shape
    print(f'Backbones at {h}x{w}, batch 1, {args.threads} threads each; PyTorch '
          f'{torch.__version__} eager vs ONNX Runtime {onnxruntime.__version__} CPU, dynamic-'
          f'size graphs; {args.repeat} timed runs each (alternating) after 1 warm-up; load '
          f'average {load_before[0]:.1f} before, {load_after[0]:.1f} after, on '
          f'{os.cpu_count()} CPUs')
    print('| backbone (config) | PyTorch s (median / best) | ONNX Runtime s (median / best) '
          '| ORT / PyTorch | max rel diff | peak RSS PyTorch / +ORT | export s |')
    print('|---|---|---|---|---|---|---|')
    for r in rows:
        print(f'| {osp.basename(r["config"])} | {r["torch_median"]:.2f} / {r["torch_best"]:.2f} '
              f'| {r["ort_median"]:.2f} / {r["ort_best"]:.2f} '
              f'| {r["ort_median"] / r["torch_median"]:.2f} | {r["max_rel"]:.1e} '
              f'| {r["torch_rss_gib"]:.1f} / {r["peak_rss_gib"]:.1f} GiB | {r["export_s"]:.0f} |')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(shape=args.shape, threads=args.threads, repeat=args.repeat,
                           load=[load_before, load_after], rows=rows), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
