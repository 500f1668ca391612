"""CPU latency and memory of ONNX Runtime beside PyTorch, measured in one run, for exported
whole models (``--part model``) or backbones (``--part backbone``, the default).

    python tools/deployment/benchmark_onnx.py --part model [--configs A.py B.py]
        [--shape H W] [--repeat 5] [--threads 2] [--profile] [--json FILE]
    python tools/deployment/benchmark_onnx.py [--configs A.py B.py] [--shape 800 1333]

**Whole models** (default configs: the CvT-13 and CMT-S Mask R-CNN at 800x1344, an
800x1333 image as the data preprocessor pads it, and the CvT-13 UperNet at 512x512): each
config's whole model (``export_onnx.py --part model``) is exported with dynamic height and
width at ``--export-shape`` (default: the timed size), in this process; the export's time and
the file's size are reported. Then, in a process of its own, one preprocessed random image of
``--shape`` goes through PyTorch's ``model.predict(..., rescale=False)`` (eval mode,
``no_grad``) and through the graph on ONNX Runtime's CPU provider, each with ``--threads``
intra-op threads: one warm-up each, then ``--repeat`` timed runs of each, alternating, so that
load from other processes falls on both alike. Peak memory is each runtime's own: the peak RSS
of that process after PyTorch's warm-up (it has not loaded ONNX Runtime yet), and of a third
process that only imports ONNX Runtime, loads the graph and runs it twice. Random weights, with
the test score threshold at 0, so that every image gives ``max_per_img`` (100) detections and
masks, as a busy COCO image does (a random detector otherwise detects nothing and its mask head
never runs). ``--profile`` adds, per runtime, the operators that take the time (ONNX Runtime's
profiler by operator type, PyTorch's by aten operator, one run each).

**Backbones** (default configs: the CvT-13 and CMT-S Mask R-CNN configs; the backbone with its
output norms, as the detector runs it, exported with dynamic height and width at the small
``--export-shape``, default 320x480, timed on one random image of ``--shape``, default
800x1333): as above, in one process per config, which reports PyTorch's peak RSS after its
warm-up and the peak after ONNX Runtime ran too, and the largest relative difference of the
outputs (as export_onnx.py defines it).

Every run first prints this machine's fp32 GEMM rate (benchmarks/measure.py), to read the
times against, and the load average before and after. Needs ``pip install -e .[deploy]``.
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
DEFAULT_CONFIGS = dict(
    backbone=[osp.join(REPO, 'configs', c) for c in ('mask_rcnn_cvt13_coco.py',
                                                     'mask_rcnn_cmt_s_coco.py')],
    model=[osp.join(REPO, 'configs', c) for c in ('mask_rcnn_cvt13_coco.py',
                                                  'mask_rcnn_cmt_s_coco.py',
                                                  'upernet_cvt13_ade20k.py')])
# Timed sizes when --shape is not given: a COCO image resized to 800x1333 and padded to a
# multiple of 32 (detectors); ADE20K's 512 crop (segmentors); the backbone rows' 800x1333.
DEFAULT_SHAPES = dict(det=(800, 1344), seg=(512, 512), backbone=(800, 1333))
TOP_OPERATORS = 8  # rows of --profile's tables


def _peak_rss_gib() -> float:
    """This process's peak RSS (GiB). Linux's ``VmHWM``, not ``getrusage``'s ``ru_maxrss``,
    which keeps across ``exec`` the high-water mark of the forked copy of the parent (an
    exported model's size in every subprocess here)."""
    try:
        with open('/proc/self/status') as f:
            line = next(ln for ln in f if ln.startswith('VmHWM:'))
        return int(line.split()[1]) / 2 ** 20  # kB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux


def _session(path: str, threads: int, profile_prefix: str = None, arena: bool = True):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_cpu_mem_arena = arena
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def _image(shape):
    """The timed image: preprocessed-like values (zero mean, unit variance), seed 0."""
    import numpy as np
    return np.random.default_rng(0).standard_normal((1, 3, *shape), dtype=np.float32)


def _alternate(first, second, repeat: int):
    """Wall seconds of ``repeat`` calls of each, alternating, so that load from other
    processes falls on both alike."""
    times = ([], [])
    for _ in range(repeat):
        for run, out in zip((first, second), times):
            start = time.perf_counter()
            run()
            out.append(time.perf_counter() - start)
    return times


def _summary(torch_times, ort_times) -> dict:
    return dict(torch_median=statistics.median(torch_times), torch_best=min(torch_times),
                ort_median=statistics.median(ort_times), ort_best=min(ort_times),
                torch_times=torch_times, ort_times=ort_times)


def ort_operator_seconds(trace: str) -> dict:
    """``{operator type: seconds}`` summed over the nodes of the last run in an ONNX Runtime
    profile (the JSON trace ``end_profiling()`` writes; a session profiles every run from its
    start, the warm-up too), largest first."""
    with open(trace) as f:
        events = json.load(f)
    last = max((e for e in events if e.get('name') == 'model_run'), key=lambda e: e['ts'])
    totals = {}
    for event in events:
        if event.get('cat') == 'Node' and event.get('name', '').endswith('_kernel_time') \
                and last['ts'] <= event['ts'] <= last['ts'] + last['dur']:
            op = event.get('args', {}).get('op_name', '?')
            totals[op] = totals.get(op, 0.0) + event['dur'] / 1e6
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def torch_operator_seconds(run) -> dict:
    """``{aten operator: self CPU seconds}`` of one call of ``run``, largest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    totals = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def measure_model(config: str, path: str, shape, repeat: int, threads: int,
                  profile_dir: str = None, arena: bool = True) -> dict:
    """Time PyTorch's ``predict`` and the exported graph ``path`` of ``config``'s whole model
    on one image of ``shape`` (see the module doc); the numbers as a dict."""
    import torch

    from cvt_mm.apis.deployment import build_part
    from cvt_mm.apis.end2end.compare import graph_results, reference_results

    torch.set_num_threads(threads)
    module, info = build_part(config, 'model', cfg_options=every_detection(config))
    kind = info['kind']
    image = torch.from_numpy(_image(shape))

    def predict():
        return reference_results(module.model, image, kind)

    expected = predict()  # PyTorch's warm-up
    torch_rss = _peak_rss_gib()
    session = _session(path, threads, arena=arena)
    feed = {session.get_inputs()[0].name: image.numpy()}
    got = graph_results(kind, session.run(None, feed))  # ONNX Runtime's warm-up
    row = _summary(*_alternate(predict, lambda: session.run(None, feed), repeat))
    row.update(config=config, kind=kind, torch_rss_gib=torch_rss)
    if 'scores' in expected[0]:
        row.update(torch_detections=len(expected[0]['scores']),
                   ort_detections=len(got[0]['scores']))
    if profile_dir:
        del session  # (a second session beside it would hold a second set of buffers)
        prefix = osp.join(profile_dir, osp.splitext(osp.basename(config))[0])
        profiled = _session(path, threads, prefix, arena)
        profiled.run(None, feed)  # warm-up, then the profiled run alone
        start = time.perf_counter()
        profiled.run(None, feed)
        row['ort_profiled_s'] = time.perf_counter() - start
        row['ort_profile'] = ort_operator_seconds(profiled.end_profiling())
        del profiled
        start = time.perf_counter()
        row['torch_profile'] = torch_operator_seconds(predict)
        row['torch_profiled_s'] = time.perf_counter() - start
    return row


def measure_ort_memory(path: str, shape, threads: int, arena: bool = True) -> float:
    """Peak RSS (GiB) of this process after loading ``path`` into ONNX Runtime and running it
    twice on one image of ``shape``: ONNX Runtime's own, where nothing imported torch."""
    session = _session(path, threads, arena=arena)
    feed = {session.get_inputs()[0].name: _image(shape)}
    for _ in range(2):
        session.run(None, feed)
    return _peak_rss_gib()


def every_detection(config: str) -> dict:
    """``--cfg-options`` that set a detector's final score threshold to 0 (so that random
    weights give ``max_per_img`` detections); none for other models."""
    from cvt_mm.apis.builders import load_config
    test_cfg = load_config(config).model.get('test_cfg') or {}
    if 'rcnn' in test_cfg:
        return {'model.test_cfg.rcnn.score_thr': 0.0}
    return {'model.test_cfg.score_thr': 0.0} if 'score_thr' in test_cfg else {}


def measure_backbone(config: str, shape, export_shape, repeat: int, threads: int,
                     work_dir: str) -> dict:
    """Export ``config``'s backbone and time both runtimes on one random image (see the
    module doc); the numbers as a dict."""
    import numpy as np
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
    session = _session(path, threads)
    feed = {session.get_inputs()[0].name: image.numpy()}
    got = session.run(None, feed)  # ONNX Runtime's warm-up

    def torch_run():
        with torch.no_grad():
            module(image)

    row = _summary(*_alternate(torch_run, lambda: session.run(None, feed), repeat))
    rel = max(float(np.abs(o - e.numpy()).max() / np.abs(e.numpy()).max())
              for o, e in zip(got, expected))
    row.update(config=config, export_s=exported['seconds'], max_rel=rel,
               torch_rss_gib=torch_rss, peak_rss_gib=_peak_rss_gib())
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='ONNX Runtime vs PyTorch CPU latency and '
                                     'memory of exported whole models or backbones')
    parser.add_argument('--part', choices=('backbone', 'model'), default='backbone',
                        help='what to export and time (default: backbone)')
    parser.add_argument('--configs', nargs='+',
                        help='configs to measure (default: CvT-13 and CMT-S Mask R-CNN, and '
                        'for --part model the CvT-13 UperNet too)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='image size to time (default: backbones 800 1333; whole '
                        'detectors 800 1344, segmentors 512 512)')
    parser.add_argument('--export-shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='example size of the dynamic export (default: backbones 320 480, '
                        'whole models the timed size)')
    parser.add_argument('--repeat', type=int, default=5, help='timed runs per runtime')
    parser.add_argument('--threads', type=int, default=2, help='intra-op threads of both')
    parser.add_argument('--no-arena', action='store_true',
                        help='whole models: ONNX Runtime without its CPU memory arena, which '
                        'keeps freed blocks for reuse (about half the peak for CvT\'s '
                        'attention at detection sizes)')
    parser.add_argument('--profile', action='store_true',
                        help='whole models: also the operators that take each runtime\'s time')
    parser.add_argument('--json', help='also write the rows to this file')
    parser.add_argument('--one', help=argparse.SUPPRESS)  # a per-config subprocess
    parser.add_argument('--onnx', help=argparse.SUPPRESS)
    parser.add_argument('--ort-memory', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--work-dir', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        parser.error(f'--repeat and --threads must be >= 1, got {args.repeat}, {args.threads}')
    args.configs = args.configs or DEFAULT_CONFIGS[args.part]
    for config in args.configs:
        if not osp.isfile(config):
            parser.error(f'config file not found: {config}')
    if min((args.shape or [64]) + (args.export_shape or [64])) < 64:
        parser.error('--shape and --export-shape sides must be >= 64 (the dynamic range)')
    if (args.profile or args.no_arena) and args.part != 'model':
        parser.error('--profile and --no-arena apply to --part model')
    return args


def _shape_of(args, config: str):
    if args.shape:
        return tuple(args.shape)
    if args.part == 'backbone':
        return DEFAULT_SHAPES['backbone']
    from cvt_mm.apis.builders import load_config, task_of
    return DEFAULT_SHAPES['seg' if task_of(load_config(config)) == 'mmseg' else 'det']


def _run_one(args, config: str, shape, work_dir: str, extra=()) -> dict:
    """This tool on one config in a process of its own; its RESULT row."""
    cmd = [sys.executable, osp.abspath(__file__), '--part', args.part, '--one', config,
           '--work-dir', work_dir, '--shape', *map(str, shape), '--repeat', str(args.repeat),
           '--threads', str(args.threads), *extra]
    if args.export_shape:
        cmd += ['--export-shape', *map(str, args.export_shape)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    result = [line for line in proc.stdout.splitlines() if line.startswith('RESULT ')]
    if proc.returncode or not result:
        raise RuntimeError(f'{config}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}')
    return json.loads(result[0][len('RESULT '):])


def measure_models(args, work_dir: str) -> list:
    """The whole-model rows: export here, time in a process per config, ONNX Runtime's
    memory in another."""
    from cvt_mm.apis.deployment import build_part, export_onnx
    rows = []
    for config in args.configs:
        shape = _shape_of(args, config)
        module, info = build_part(config, 'model', cfg_options=every_detection(config))
        path = osp.join(work_dir, osp.splitext(osp.basename(config))[0] + '.onnx')
        exported = export_onnx(module, path, args.export_shape or shape, dynamic=True,
                               names=info['outputs'], metadata=info['metadata'])
        del module
        extra = ['--onnx', path] + (['--no-arena'] if args.no_arena else [])
        row = _run_one(args, config, shape, work_dir,
                       extra + (['--profile'] if args.profile else []))
        memory = _run_one(args, config, shape, work_dir, extra + ['--ort-memory'])
        row.update(shape=list(shape), export_s=exported['seconds'],
                   file_mib=exported['bytes'] / 2 ** 20, ort_rss_gib=memory['ort_rss_gib'])
        rows.append(row)
    return rows


def print_models(rows, profile: bool) -> None:
    print('| model (config) | size | PyTorch s (median / best) | ONNX Runtime s (median / '
          'best) | ORT / PyTorch | peak RSS PyTorch / ORT | export s | file MiB |')
    print('|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f'| {osp.basename(r["config"])} | {r["shape"][0]}x{r["shape"][1]} '
              f'| {r["torch_median"]:.2f} / {r["torch_best"]:.2f} '
              f'| {r["ort_median"]:.2f} / {r["ort_best"]:.2f} '
              f'| {r["ort_median"] / r["torch_median"]:.2f} '
              f'| {r["torch_rss_gib"]:.1f} / {r["ort_rss_gib"]:.1f} GiB '
              f'| {r["export_s"]:.0f} | {r["file_mib"]:.0f} |')
    for r in rows:
        if 'torch_detections' in r:
            print(f'{osp.basename(r["config"])}: {r["torch_detections"]} detections by '
                  f'PyTorch, {r["ort_detections"]} by ONNX Runtime')
    if not profile:
        return
    for r in rows:
        for runtime, key in (('ONNX Runtime', 'ort'), ('PyTorch', 'torch')):
            ops = r[f'{key}_profile']
            total = sum(ops.values())
            top = list(ops.items())[:TOP_OPERATORS]
            print(f'{osp.basename(r["config"])}, {runtime}, one profiled run of '
                  f'{r[f"{key}_profiled_s"]:.2f} s, {total:.2f} s in operators: '
                  + ', '.join(f'{op} {s:.2f} s ({s / total:.0%})' for op, s in top))


def print_backbones(rows) -> None:
    print('| backbone (config) | PyTorch s (median / best) | ONNX Runtime s (median / best) '
          '| ORT / PyTorch | max rel diff | peak RSS PyTorch / +ORT | export s |')
    print('|---|---|---|---|---|---|---|')
    for r in rows:
        print(f'| {osp.basename(r["config"])} | {r["torch_median"]:.2f} / {r["torch_best"]:.2f} '
              f'| {r["ort_median"]:.2f} / {r["ort_best"]:.2f} '
              f'| {r["ort_median"] / r["torch_median"]:.2f} | {r["max_rel"]:.1e} '
              f'| {r["torch_rss_gib"]:.1f} / {r["peak_rss_gib"]:.1f} GiB | {r["export_s"]:.0f} |')


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.one:  # a per-config subprocess
        shape = tuple(args.shape)
        if args.ort_memory:
            row = dict(ort_rss_gib=measure_ort_memory(args.onnx, shape, args.threads,
                                                      not args.no_arena))
        elif args.part == 'model':
            row = measure_model(args.one, args.onnx, shape, args.repeat, args.threads,
                                args.work_dir if args.profile else None, not args.no_arena)
        else:
            row = measure_backbone(args.one, shape, args.export_shape or (320, 480),
                                   args.repeat, args.threads, args.work_dir)
        print('RESULT ' + json.dumps(row))
        return 0
    from cvt_mm.apis.deployment import require_deploy_packages
    require_deploy_packages()
    import onnxruntime
    import torch
    sys.path.insert(0, REPO)
    from benchmarks.measure import machine_rates

    rates = machine_rates(args.threads)
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as work_dir:
            if args.part == 'model':
                rows = measure_models(args, work_dir)
            else:
                rows = [_run_one(args, c, _shape_of(args, c), work_dir) for c in args.configs]
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    load_after = os.getloadavg()

    h, w = _shape_of(args, args.configs[0])
    what = 'Whole models, random weights' if args.part == 'model' else f'Backbones at {h}x{w}'
    if args.no_arena:
        what += ', ONNX Runtime without its CPU memory arena'
    print(f'{what}, batch 1, {args.threads} threads each; PyTorch {torch.__version__} eager vs '
          f'ONNX Runtime {onnxruntime.__version__} CPU, dynamic-size graphs; {args.repeat} '
          f'timed runs each (alternating) after 1 warm-up; fp32 GEMM '
          f'{rates["gemm_gflops_per_s"]:.0f} GFLOP/s; load average {load_before[0]:.1f} '
          f'before, {load_after[0]:.1f} after, on {os.cpu_count()} CPUs')
    if args.part == 'model':
        print_models(rows, args.profile)
    else:
        print_backbones(rows)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(part=args.part, shape=args.shape, threads=args.threads,
                           arena=not args.no_arena,
                           repeat=args.repeat, gemm_gflops_per_s=rates['gemm_gflops_per_s'],
                           load=[load_before, load_after], rows=rows), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
