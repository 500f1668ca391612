"""CPU forward time and peak memory of a backbone, per input size and attention path.

    python tools/benchmark_backbone.py --model "dict(type='CvT', arch='13')" \\
        --sizes 224x224 800x1333 --paths sdpa reference

Each (size, path) case runs in its own subprocess, so its peak memory is its own:

* ``time``: median wall time of ``--runs`` forward passes (batch 1, ``torch.no_grad()``, eval
  mode, random weights) after ``--warmup`` passes;
* ``peak RSS``: the subprocess's maximum resident set size (``getrusage`` ``ru_maxrss``), which
  includes the Python interpreter, the imported libraries and the weights;
* ``model RSS``: the same measure right after the model was built, before any forward; the
  difference is roughly what the forward pass itself needed at its peak.

A case that dies (e.g. killed for memory) is reported with its exit status instead of numbers.
Times depend on the machine's load; ``--threads`` sets torch's intra-op threads.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def run_case(cfg: dict, size, path: str, warmup: int, runs: int, threads: int) -> dict:
    """Executed inside the per-case subprocess."""
    import torch

    sys.path.insert(0, REPO)
    import cvt_mm  # noqa: F401  (registers the backbones)
    from cvt_mm.registry import MODELS

    torch.set_num_threads(threads)
    model = MODELS.build(dict(cfg, use_sdpa=path == 'sdpa')).eval()
    x = torch.randn(1, getattr(model, 'in_channels', 3), *size)
    model_rss = rss_mib()
    times = []
    with torch.no_grad():
        for i in range(warmup + runs):
            start = time.perf_counter()
            model(x)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return dict(time_s=statistics.median(times), peak_rss_mib=rss_mib(), model_rss_mib=model_rss)


def torch_default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--model', required=True, type=parse_model,
                        help='backbone config, e.g. "dict(type=\'CvT\', arch=\'13\')"')
    parser.add_argument('--sizes', nargs='+', type=parse_size, default=[(224, 224)],
                        help='input sizes HxW (batch 1)')
    parser.add_argument('--paths', nargs='+', choices=('sdpa', 'reference'),
                        default=['sdpa', 'reference'], help='attention paths')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--threads', type=int, default=torch_default_threads())
    parser.add_argument('--case', help=argparse.SUPPRESS)  # internal: run one case
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.runs < 1:
        parser.error('--warmup must be >= 0 and --runs >= 1')

    if args.case:
        size, path = json.loads(args.case)
        print(json.dumps(run_case(args.model, size, path, args.warmup, args.runs, args.threads)))
        return 0

    print(f'model: {args.model}  threads: {args.threads}  load average: '
          f'{" ".join(f"{v:.2f}" for v in os.getloadavg())}')
    print(f'{"size":>10} {"path":>10} {"time (s)":>10} {"peak RSS (MiB)":>15} '
          f'{"model RSS (MiB)":>16}')
    model_text = repr(args.model)
    for size in args.sizes:
        for path in args.paths:
            cmd = [sys.executable, os.path.abspath(__file__), '--model', model_text,
                   '--warmup', str(args.warmup), '--runs', str(args.runs),
                   '--threads', str(args.threads), '--case', json.dumps([size, path])]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            label = f'{size[0]}x{size[1]}'
            if proc.returncode != 0:
                reason = 'killed (likely out of memory)' if proc.returncode in (-9, 137) \
                    else proc.stderr.strip().splitlines()[-1:]
                print(f'{label:>10} {path:>10} failed: exit {proc.returncode}, {reason}')
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f'{label:>10} {path:>10} {res["time_s"]:>10.3f} {res["peak_rss_mib"]:>15.0f} '
                  f'{res["model_rss_mib"]:>16.0f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
