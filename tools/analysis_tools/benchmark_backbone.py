"""CPU work, time, speed and peak memory of a backbone, per input size, mode and attention path.

    python tools/analysis_tools/benchmark_backbone.py --model "dict(type='CMT', arch='s')" \\
        --sizes 800x1333 --modes infer train --profile 12 [--compile] [--json out.json]

Each case runs in its own subprocess, so its peak memory is its own. Batch 1 unless
``--batch``; random weights (the cost does not depend on them). Per case:

* ``GFLOP``: counted by :func:`cvt_mm.flops.count_flops` in one untimed pass (a multiply-add
  is 2 FLOPs; attention included). ``infer`` counts the forward, ``train`` forward + backward.
* ``fwd s`` / ``bwd s``: median wall time over ``--runs`` after ``--warmup``. ``infer`` is
  eval mode under ``torch.no_grad()``; ``train`` is training mode, forward then backward of
  the sum of the outputs' means (``bwd s`` is the backward alone).
* ``GFLOP/s``: the counted work over the measured time of the whole step.
* ``peak RSS``: the subprocess's maximum resident set size (interpreter, libraries and
  weights included); ``model RSS`` is the same right after building the model.
* ``--profile N``: the N operators with the most self CPU time in one more step, by
  ``torch.profiler``, for the forward and (in ``train``) the backward separately.
* ``--compile``: also runs each ``train`` case under ``torch.compile`` (inductor); its
  first step (compilation) is reported apart, the rest timed as above, and the table gives
  the eager/compiled ratio.

A case that dies (e.g. killed for memory) is reported with its exit status instead of numbers.
Times depend on the machine's load (printed); ``--threads`` sets torch's intra-op threads.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def parse_size(text: str):
    try:
        h, w = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'size must look like 224x224 (HxW), got {text!r}')
    if h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f'size must be positive, got {text!r}')
    return h, w


def parse_model(text: str) -> dict:
    """A ``dict(...)`` or ``{...}`` literal of plain values (no names other than dict)."""
    try:
        cfg = eval(text, {'__builtins__': {}, 'dict': dict, 'True': True, 'False': False,
                          'None': None})
    except Exception as err:  # noqa: BLE001 - any parse failure is the user's input
        raise argparse.ArgumentTypeError(f'cannot parse --model {text!r}: {err}')
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise argparse.ArgumentTypeError(f'--model must be a dict with a type, got {text!r}')
    return cfg


def rss_mib() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine_rates(threads: int) -> dict:
    """This machine's limits, measured now: fp32 GEMM GFLOP/s (2048^3, best of 3) and the
    memory bandwidth of a 256 MiB copy (GB/s read + written, best of 3). The GFLOP/s of a
    model are read against the first; element-wise operators are bound by the second."""
    import torch
    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    src, dst = torch.randn(2 ** 26), torch.empty(2 ** 26)
    gemm, copy = [], []
    for _ in range(3):
        start = time.perf_counter()
        torch.mm(a, b)
        gemm.append(2 * 2048 ** 3 / (time.perf_counter() - start) / 1e9)
        start = time.perf_counter()
        dst.copy_(src)
        copy.append(2 * src.numel() * 4 / (time.perf_counter() - start) / 1e9)
    return dict(gemm_gflops_per_s=max(gemm), copy_gb_per_s=max(copy))


def top_operators(fn, count: int) -> str:
    """``torch.profiler``'s table of the ``count`` operators with the most self CPU time."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=count,
                                     max_name_column_width=48)


def run_case(args, size, path: str, mode: str, compiled: bool) -> dict:
    """Executed inside the per-case subprocess."""
    import torch

    import cvt_mm  # noqa: F401  (registers the backbones)
    from cvt_mm.flops import count_flops
    from cvt_mm.registry import MODELS

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = MODELS.build(dict(args.model, use_sdpa=path == 'sdpa'))
    model.init_weights()
    model.train(mode == 'train')
    x = torch.randn(args.batch, getattr(model, 'in_channels', 3), *size)
    model_rss = rss_mib()
    net = torch.compile(model) if compiled else model

    def forward():
        if mode == 'infer':
            with torch.no_grad():
                return net(x)
        return net(x)

    def backward(outs):
        if mode == 'train':
            sum(o.float().mean() for o in outs).backward()
            model.zero_grad(set_to_none=True)

    result = dict(compile_s=None)
    if compiled:  # the first call compiles; report it apart from the steady-state times
        start = time.perf_counter()
        backward(forward())
        result['compile_s'] = time.perf_counter() - start
    fwd_times, bwd_times = [], []
    for i in range(args.warmup + args.runs):
        start = time.perf_counter()
        outs = forward()
        middle = time.perf_counter()
        backward(outs)
        del outs
        if i >= args.warmup:
            fwd_times.append(middle - start)
            bwd_times.append(time.perf_counter() - middle)
    fwd_flops = count_flops(forward)  # infer: under no_grad, as timed
    total_flops = fwd_flops
    if mode == 'train':
        total_flops = count_flops(lambda: backward(forward()))
    result.update(
        fwd_s=statistics.median(fwd_times), bwd_s=statistics.median(bwd_times) if
        mode == 'train' else None, gflop=total_flops.gflops, fwd_gflop=fwd_flops.gflops,
        attention_share=fwd_flops.attention_share(), peak_rss_mib=rss_mib(),
        model_rss_mib=model_rss)
    result['gflops_per_s'] = result['gflop'] / (result['fwd_s'] + (result['bwd_s'] or 0))
    if args.profile:
        outs = {}
        result['profile_forward'] = top_operators(lambda: outs.setdefault('o', forward()),
                                                  args.profile)
        if mode == 'train':
            result['profile_backward'] = top_operators(lambda: backward(outs.pop('o')),
                                                       args.profile)
    return result


def case_env(no_thp: bool) -> dict:
    """The environment of a case: as tools/train.py runs, with huge pages for large CPU
    tensors, unless ``no_thp``."""
    env = dict(os.environ)
    env.pop('THP_MEM_ALLOC_ENABLE', None)
    if not no_thp:
        env['THP_MEM_ALLOC_ENABLE'] = '1'
    return env


def torch_default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', required=True, type=parse_model,
                        help='backbone config, e.g. "dict(type=\'CvT\', arch=\'13\')"')
    parser.add_argument('--sizes', nargs='+', type=parse_size, default=[(224, 224)],
                        help='input sizes HxW')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--modes', nargs='+', choices=('infer', 'train'), default=['infer'],
                        help='infer: eval forward without grad; train: forward + backward')
    parser.add_argument('--paths', nargs='+', choices=('sdpa', 'reference'), default=['sdpa'],
                        help='attention paths (reference: the plain formula, for comparison)')
    parser.add_argument('--compile', action='store_true',
                        help='also time train cases under torch.compile (inductor)')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--threads', type=int, default=torch_default_threads())
    parser.add_argument('--profile', type=int, default=0, metavar='N',
                        help='print the N operators with the most self CPU time per case')
    parser.add_argument('--no-thp', action='store_true',
                        help='without THP_MEM_ALLOC_ENABLE=1 (huge pages; tools/train.py sets it)')
    parser.add_argument('--json', help='also write the results to this file')
    parser.add_argument('--case', help=argparse.SUPPRESS)  # internal: run one case
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.runs < 1 or args.batch < 1 or args.profile < 0:
        parser.error('--warmup and --profile must be >= 0, --runs and --batch >= 1')

    if args.case:
        size, path, mode, compiled = json.loads(args.case)
        print(json.dumps(run_case(args, size, path, mode, compiled)))
        return 0

    cases = [(size, path, mode, False) for size in args.sizes for mode in args.modes
             for path in args.paths]
    if args.compile:
        cases += [(size, path, 'train', True) for size in args.sizes for path in args.paths]
    rates = machine_rates(args.threads)
    print(f'model: {args.model}  batch: {args.batch}  threads: {args.threads}  load average: '
          f'{" ".join(f"{v:.2f}" for v in os.getloadavg())}\nthis machine now: fp32 GEMM '
          f'{rates["gemm_gflops_per_s"]:.0f} GFLOP/s, memory copy '
          f'{rates["copy_gb_per_s"]:.1f} GB/s; THP_MEM_ALLOC_ENABLE={0 if args.no_thp else 1}')
    header = (f'{"size":>9} {"path":>9} {"mode":>13} {"GFLOP":>8} {"fwd s":>7} {"bwd s":>7} '
              f'{"GFLOP/s":>8} {"peak RSS":>9} {"model RSS":>10}')
    results, lines = [], [header]
    print(header, flush=True)
    for size, path, mode, compiled in cases:
        label = f'{size[0]}x{size[1]}'
        mode_label = mode + (' compiled' if compiled else '')
        cmd = [sys.executable, os.path.abspath(__file__), '--model', repr(args.model),
               '--batch', str(args.batch), '--warmup', str(args.warmup), '--runs',
               str(args.runs), '--threads', str(args.threads), '--profile', str(args.profile),
               '--case', json.dumps([size, path, mode, compiled])]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=case_env(args.no_thp))
        if proc.returncode != 0:
            reason = 'killed (likely out of memory)' if proc.returncode in (-9, 137) \
                else proc.stderr.strip().splitlines()[-1:]
            lines.append(f'{label:>9} {path:>9} {mode_label:>13} failed: exit '
                         f'{proc.returncode}, {reason}')
            print(lines[-1], flush=True)
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res.update(size=label, path=path, mode=mode, compiled=compiled)
        results.append(res)
        bwd = f'{res["bwd_s"]:7.2f}' if res['bwd_s'] is not None else f'{"-":>7}'
        lines.append(f'{label:>9} {path:>9} {mode_label:>13} {res["gflop"]:8.1f} '
                     f'{res["fwd_s"]:7.2f} {bwd} {res["gflops_per_s"]:8.1f} '
                     f'{res["peak_rss_mib"]:7.0f}Mi {res["model_rss_mib"]:8.0f}Mi')
        if compiled:
            eager = next((r for r in results if r['size'] == label and r['path'] == path
                          and r['mode'] == 'train' and not r['compiled']), None)
            if eager:
                ratio = (eager['fwd_s'] + eager['bwd_s']) / (res['fwd_s'] + res['bwd_s'])
                res['speedup'] = ratio
                lines[-1] += f'  (compiled in {res["compile_s"]:.0f} s; {ratio:.2f}x eager)'
        for part in ('forward', 'backward'):
            if res.get(f'profile_{part}'):
                print(f'{label} {path} {mode_label}: top operators, {part}\n'
                      f'{res[f"profile_{part}"]}')
        print(lines[-1], flush=True)
    if args.profile:  # the table again, together, after the profiles
        print('\n' + '\n'.join(lines))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(model=args.model, threads=args.threads, batch=args.batch,
                           machine=rates, results=results), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
