"""The command line of the benchmarks (``tools/analysis_tools/benchmark.py``): each case in
its own process so its peak memory is its own, the results as tables and JSON. The timer and
the memory unit: :mod:`benchmarks.measure`; the cases: :mod:`benchmarks.cases`.

Commands (``python tools/analysis_tools/benchmark.py COMMAND ...``):

* ``backbone``: a backbone per input size, mode (``infer``: eval forward under
  ``torch.no_grad()``; ``train``: forward, then backward of the sum of the outputs' means) and
  attention path; ``--compile`` adds each case under ``torch.compile`` (inductor), its
  compilation reported apart, with its speed and peak memory over the eager case's;
  ``--vs-hf`` adds Hugging Face's CvT classifier at the same
  arch (path ``hf``) and ``--official PATH`` the official model run from a checkout (path
  ``official``; both :mod:`benchmarks.peers`), each with its time over
  ours; ``--entry-points`` adds the same model through timm, transformers and the code of an
  exported Hub folder (paths ``timm``, ``hf-backbone``, ``hub-code``), each with its time over
  ours; ``--rounds N`` runs every case N times,
  alternated (ours, then the peers), and prints the medians and the peers' ratios from them.
* ``train-iter``: one training iteration of a head (``--head``: Mask R-CNN by default,
  Cascade Mask R-CNN, DINO 4-scale, Mask2Former on COCO and ADE20K, Semantic FPN) with
  CvT-13, CMT-S and the toolbox's Swin-T of that head, side by side (built or constructed as
  :mod:`benchmarks.cases` says), at the head's training size: ``fwd s`` is data
  preprocessing, forward and losses, ``bwd s``
  the backward and the optimizer step; the ratios to Swin-T's time, work and peak memory.
* ``compare REF``: this checkout against a git ref, case by case, alternated
  (:mod:`benchmarks.compare`).
* ``cls-step``: ``model.train_step`` of a classification config at its training resolution,
  with the config's batch augmentations, loss and optimizer, in this process (start it as
  ``bash tools/misc/cpu_malloc.sh python tools/analysis_tools/benchmark.py cls-step ...`` to
  time it with the launchers' allocator setting).

Per case: ``GFLOP`` counted by :func:`cvt_mm.apis.flops.count_flops` in one untimed pass (a
multiply-add is 2 FLOPs; attention included; mmcv's RoIAlign and the like not counted),
the median time over the timed runs after the warm-up, ``GFLOP/s`` = work over time, and
``--profile N`` the N operators with the most self CPU time, forward and backward apart,
and the matrix products' share of the profiled pass; with peers, a
peer's ratio over that share bounds what we can gain by leaner code around the same products
(``at most`` in the medians table).
Backbone training cases also print ``held GiB``: what the forward keeps for the backward,
per stage, counted exactly (the peak resident set also holds
freed memory the allocator kept, so it moves by hundreds of MB between runs).
Every run first prints the machine's own fp32 GEMM rate and memory bandwidth, to read the
numbers against (machines of one kind differ by up to 2x).

Example::

    python tools/analysis_tools/benchmark.py backbone --model "dict(type='CMT', arch='s')" \\
        --sizes 800x1333 --modes infer train --profile 12
    python tools/analysis_tools/benchmark.py train-iter --models cvt13 swin_t --iters 2
    python tools/analysis_tools/benchmark.py train-iter --head sem_fpn --iters 2
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
from typing import List, Optional

import torch

from .cases import (
    REPO,
    SWIN_T_CONSTRUCTED,
    TRAIN_ITER_CONFIGS,
    TRAIN_ITER_SIZES,
    backbone_case,
    case_env,
    classification_step_case,
    default_threads,
    train_iter_config,
    train_iteration_case,
)
from .measure import machine_rates
from .peers import PEER_NAMES, PEER_PATHS, official_family, peer_config

__all__ = ['build_parser', 'main']

# Cases run as the launchers run training: glibc's malloc reusing large freed blocks.
CPU_MALLOC = osp.join(REPO, 'tools', 'misc', 'cpu_malloc.sh')


def _parse_size(text: str):
    try:
        h, w = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'size must look like 224x224 (HxW), got {text!r}')
    if h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f'size must be positive, got {text!r}')
    return h, w


def _parse_model(text: str) -> dict:
    """A ``dict(...)`` or ``{...}`` literal of plain values (no names other than dict)."""
    try:
        cfg = eval(text, {'__builtins__': {}, 'dict': dict, 'True': True, 'False': False,
                          'None': None})
    except Exception as err:  # noqa: BLE001 - any parse failure is the user's input
        raise argparse.ArgumentTypeError(f'cannot parse --model {text!r}: {err}')
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise argparse.ArgumentTypeError(f'--model must be a dict with a type, got {text!r}')
    return cfg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='benchmark.py', description='Work, time, speed and peak memory of backbones, '
        'detector and segmentor training iterations and classification training steps.')
    sub = parser.add_subparsers(dest='command', required=True)

    b = sub.add_parser('backbone', help='a backbone per size, mode and attention path')
    b.add_argument('--model', required=True, type=_parse_model,
                   help='backbone config, e.g. "dict(type=\'CvT\', arch=\'13\')"')
    b.add_argument('--sizes', nargs='+', type=_parse_size, default=[(224, 224)],
                   help='input sizes HxW')
    b.add_argument('--batch', type=int, default=1)
    b.add_argument('--modes', nargs='+', choices=('infer', 'train'), default=['infer'],
                   help='infer: eval forward without grad; train: forward + backward')
    b.add_argument('--paths', nargs='+', choices=('sdpa', 'reference'), default=['sdpa'],
                   help='sdpa: the fast paths (fused attention and the rest of '
                   'cvt_mm.models.fast); reference: the formulas as written, for comparison')
    b.add_argument('--compile', action='store_true',
                   help='also time every case under torch.compile (inductor)')
    b.add_argument('--vs-hf', action='store_true',
                   help="also time Hugging Face's CvtForImageClassification at the same arch "
                   "(--model a CvT with out_type='logits'; needs transformers) and print "
                   'its time over ours')
    b.add_argument('--entry-points', action='store_true',
                   help='also time the same model through timm (timm.create_model, '
                   'features_only for maps), transformers (AutoModel on our backbone '
                   "config; maps only) and an exported Hub folder's code (its classifier or "
                   'backbone), --model a CvT or CMT with a named arch, and print each time '
                   'over ours')
    b.add_argument('--official', metavar='PATH',
                   help='also time the official model at the same arch (--model a CvT or CMT '
                   "with out_type='logits'), run from PATH, the root of a checkout of "
                   'microsoft/CvT or huawei-noah/Efficient-AI-Backbones (needs timm), and print '
                   'its time over ours')
    b.add_argument('--warmup', type=int, default=1)
    b.add_argument('--runs', type=int, default=3, help='timed runs per case, after the warm-up')
    b.add_argument('--rounds', type=int, default=1,
                   help='run every case this many times, each in its own process, alternated '
                   '(ours, then the peers, per size and mode), and print the medians and the '
                   "peers' ratios from them")
    b.add_argument('--threads', type=int, default=default_threads())

    t = sub.add_parser('train-iter', help='one detector or segmentor training iteration per '
                       'model of a head, beside Swin-T')
    t.add_argument('--head', choices=tuple(TRAIN_ITER_CONFIGS), default='mask_rcnn',
                   help='the head (default: mask_rcnn); its CvT-13, CMT-S and Swin-T configs')
    t.add_argument('--models', nargs='+', choices=('cvt13', 'cmt_s', 'swin_t'),
                   default=['cvt13', 'cmt_s', 'swin_t'])
    t.add_argument('--size', type=int, nargs=2, metavar=('H', 'W'),
                   help="image size (default: the head's training size, 800 1333 for Mask "
                   'R-CNN; TRAIN_ITER_SIZES)')
    t.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    t.add_argument('--iters', type=int, default=2, help='timed iterations (after 1 warm-up)')

    c = sub.add_parser('cls-step', help='a classification training step')
    c.add_argument('configs', nargs='+', help='classification config files')
    c.add_argument('--batch-size', type=int, default=8)
    c.add_argument('--size', type=int, help="input size (default: the config's crop)")
    c.add_argument('--warmup', type=int, default=1, help='untimed iterations first')
    c.add_argument('--iters', type=int, default=5, help='timed iterations')
    for p in (b, t):
        p.add_argument('--profile', type=int, default=0, metavar='N',
                       help='print the N operators with the most self CPU time per case, '
                       "and the matrix products' share of the profiled pass (with peers: "
                       "'at most', the bound it puts on peer / ours)")
        p.add_argument('--thp', action='store_true',
                       help='with THP_MEM_ALLOC_ENABLE=1: huge pages for large CPU tensors '
                       '(slower and larger at 224 in docs/benchmarks.md; tools/train.py does '
                       'not set it)')
        p.add_argument('--json', help='also write the results to this file')
        p.add_argument('--case', help=argparse.SUPPRESS)  # internal: run one case
    return parser


def _run_case(argv: List[str], case, thp: bool) -> subprocess.CompletedProcess:
    """``argv`` with ``--case`` in a fresh process (``python -m benchmarks.cli`` in the
    checkout)."""
    return subprocess.run(['bash', CPU_MALLOC, sys.executable, '-m', 'benchmarks.cli', *argv,
                           '--case', json.dumps(case)], capture_output=True, text=True,
                          env=case_env(thp), cwd=REPO)


def _print_machine(threads: int, thp: bool) -> dict:
    rates = machine_rates(threads)
    print(f'this machine now: fp32 GEMM {rates["gemm_gflops_per_s"]:.0f} GFLOP/s, memory copy '
          f'{rates["copy_gb_per_s"]:.1f} GB/s; THP_MEM_ALLOC_ENABLE={1 if thp else 0}; '
          f'CVT_MM_MALLOC={os.environ.get("CVT_MM_MALLOC", "reuse")}; '
          f'{threads} threads; load average '
          f'{" ".join(f"{v:.2f}" for v in os.getloadavg())}', flush=True)
    return rates


def _failure(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode in (-9, 137):
        return 'killed (likely out of memory)'
    return ' '.join(proc.stderr.strip().splitlines()[-1:])


def _write_json(path: Optional[str], **fields) -> None:
    """The ``--json`` file of a subcommand, when one was asked for."""
    if path:
        with open(path, 'w') as f:
            json.dump(fields, f, indent=1)


def _eager_result(results: List[dict], size: str, path: str, mode: str) -> Optional[dict]:
    """The eager (not compiled) result of one size, attention path and mode, if run."""
    return next((r for r in results if (r['size'], r['path'], r['mode']) == (size, path, mode)
                 and not r['compiled']), None)


def _peer_ratio(res: dict, ours: Optional[dict]) -> Optional[float]:
    """A peer's wall time (forward + backward) over ours: > 1 is ours ahead."""
    if not ours:
        return None
    return (res['fwd_s'] + (res['bwd_s'] or 0)) / (ours['fwd_s'] + (ours['bwd_s'] or 0))


def _median_of_rounds(runs: List[dict]) -> dict:
    """One case's result over its rounds: the first round's, with the medians of the times
    (the wall time's median of its own: fwd + bwd per round, then the median)."""
    res = dict(runs[0])
    walls = [r['fwd_s'] + (r['bwd_s'] or 0) for r in runs]
    res['round_wall_s'] = walls
    if len(runs) > 1:
        res['fwd_s'] = statistics.median(r['fwd_s'] for r in runs)
        if res['bwd_s'] is not None:
            res['bwd_s'] = statistics.median(r['bwd_s'] for r in runs)
        res['peak_gib'] = statistics.median(r['peak_gib'] for r in runs)
    res['wall_s'] = statistics.median(walls)
    res['gflops_per_s'] = res['gflop'] / res['wall_s']
    return res


def _backbone_line(res: dict, label: str, path: str, mode_label: str) -> str:
    bwd = f'{res["bwd_s"]:7.2f}' if res['bwd_s'] is not None else f'{"-":>7}'
    line = (f'{label:>9} {path:>11} {mode_label:>13} {res["gflop"]:8.1f} '
            f'{res["fwd_s"]:7.2f} {bwd} {res["gflops_per_s"]:8.1f} '
            f'{res["peak_gib"]:9.2f} {res["model_gib"]:10.2f}')
    if res.get('held_gib'):
        line += (f' {sum(res["held_gib"].values()):9.2f}  (' + ', '.join(
            f'{k} {v:.2f}' for k, v in res['held_gib'].items()) + ')')
    return line


def _backbone(args) -> int:
    common = ['backbone', '--model', repr(args.model), '--batch', str(args.batch), '--warmup',
              str(args.warmup), '--runs', str(args.runs), '--threads', str(args.threads)]
    if args.official:
        common += ['--official', args.official]
    if args.case:
        size, path, mode, compiled = json.loads(args.case)
        model_cfg = peer_config(path, args.model, size, args.official) \
            if path in PEER_PATHS else args.model
        print(json.dumps(backbone_case(model_cfg, size, args.batch, mode, path, compiled,
                                       args.warmup, args.runs, args.threads, args.profile)))
        return 0
    peers = (['hf'] if args.vs_hf else []) + (['official'] if args.official else [])
    if args.entry_points:
        peers += ['timm', 'hub-code'] + (
            [] if args.model.get('out_type') == 'logits' else ['hf-backbone'])
    try:  # what the peers cannot run is said before anything runs
        for peer in peers:
            for size in args.sizes:
                peer_config(peer, args.model, size, args.official)
        if args.official and importlib.util.find_spec('timm') is None:
            raise ImportError(f'--official runs the official {official_family(args.official)} '
                              'code, which imports timm: pip install -e .[peers]')
    except (ValueError, ImportError) as err:
        raise SystemExit(f'benchmark.py backbone: {err}')
    # Each round runs every case once, each in its own process: ours, then the peers, per
    # size and mode, so that a noisy machine slows both sides alike.
    cases = [(size, path, mode, False) for size in args.sizes for mode in args.modes
             for path in args.paths + peers]
    if args.compile:
        cases += [(size, path, mode, True) for size in args.sizes for mode in args.modes
                  for path in args.paths]
    print(f'model: {args.model}  batch: {args.batch}' + (
        f'  rounds: {args.rounds} (each case in its own process, ours then the peers)'
        if args.rounds > 1 else ''))
    rates = _print_machine(args.threads, args.thp)
    header = (f'{"size":>9} {"path":>11} {"mode":>13} {"GFLOP":>8} {"fwd s":>7} {"bwd s":>7} '
              f'{"GFLOP/s":>8} {"peak GiB":>9} {"model GiB":>10} {"held GiB":>9}')
    runs, lines = {}, [header]
    print(header, flush=True)
    for round_ in range(args.rounds):
        done = {}  # this round's results, for its own ratios
        for case in cases:
            size, path, mode, compiled = case
            label, mode_label = f'{size[0]}x{size[1]}', mode + (' compiled' if compiled else '')
            profile = args.profile if round_ == 0 else 0  # the first round's profiles only
            proc = _run_case(common + ['--profile', str(profile)],
                             [size, path, mode, compiled], args.thp)
            prefix = f'round {round_ + 1}: ' if args.rounds > 1 else ''
            if proc.returncode != 0:
                lines.append(f'{prefix}{label:>9} {path:>11} {mode_label:>13} failed: exit '
                             f'{proc.returncode}, {_failure(proc)}')
                print(lines[-1], flush=True)
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res.update(size=label, path=path, mode=mode, compiled=compiled)
            runs.setdefault(tuple(map(str, case)), []).append(res)
            done[(label, path, mode, compiled)] = res
            lines.append(prefix + _backbone_line(res, label, path, mode_label))
            ratio = _peer_ratio(res, done.get((label, 'sdpa', mode, False))) \
                if path in PEER_PATHS else None
            if ratio:  # a peer's time over ours: > 1 is ours ahead
                lines[-1] += f'  ({PEER_NAMES[path]} / ours: {ratio:.2f}x the time)'
            if res.get('matrix_product_share'):
                lines[-1] += f'  (matrix products {res["matrix_product_share"]:.0%} of it)'
            if compiled and (label, path, mode, False) in done:
                eager = done[(label, path, mode, False)]
                speedup = (eager['fwd_s'] + (eager['bwd_s'] or 0)) / \
                    (res['fwd_s'] + (res['bwd_s'] or 0))
                lines[-1] += (f'  (compiled in {res["compile_s"]:.0f} s; {speedup:.2f}x eager '
                              f'speed, {res["peak_gib"] / eager["peak_gib"]:.2f}x its peak)')
            for part in ('forward', 'backward'):
                if res.get(f'profile_{part}'):
                    print(f'{label} {path} {mode_label}: top operators, {part}\n'
                          f'{res[f"profile_{part}"]}')
            print(lines[-1], flush=True)
    results = [_median_of_rounds(r) for r in runs.values()]
    for res in results:
        if res['path'] in PEER_PATHS:
            ours = _eager_result(results, res['size'], 'sdpa', res['mode'])
            if ours:
                res['peer_over_ours'] = _peer_ratio(res, ours) if args.rounds == 1 else \
                    res['wall_s'] / ours['wall_s']
                res[f'{res["path"]}_over_ours'] = res['peer_over_ours']
                if ours.get('matrix_product_share'):  # were all but our products gone
                    res['peer_over_ours_bound'] = (res['peer_over_ours']
                                                   / ours['matrix_product_share'])
        if res['compiled']:
            eager = _eager_result(results, res['size'], res['path'], 'train')
            if eager:
                res['speedup'] = eager['wall_s'] / res['wall_s']
    if args.rounds > 1:  # the medians, and the peers' ratios from them
        lines += ['', f'medians of {args.rounds} rounds ({rates["gemm_gflops_per_s"]:.0f} GFLOP/s '
                  f'fp32 GEMM; load average {" ".join(f"{v:.2f}" for v in os.getloadavg())} '
                  'at the end); peer / ours: the median time of the peer over ours, > 1 is '
                  'ours ahead', header]
        for res in results:
            mode_label = res['mode'] + (' compiled' if res['compiled'] else '')
            lines.append(_backbone_line(res, res['size'], res['path'], mode_label)
                         + f'  params {res["params_m"]:.2f}M')
            if res.get('peer_over_ours'):
                lines[-1] += f'  peer / ours {res["peer_over_ours"]:.2f}'
            if res.get('peer_over_ours_bound'):
                lines[-1] += f' (at most {res["peer_over_ours_bound"]:.2f})'
            if res.get('speedup'):
                lines[-1] += f'  {res["speedup"]:.2f}x eager'
        print('\n'.join(lines[-len(results) - 3:]), flush=True)
    elif args.profile:  # the table again, together, after the profiles
        print('\n' + '\n'.join(lines))
    _write_json(args.json, model=args.model, threads=args.threads, batch=args.batch,
                rounds=args.rounds, official=args.official, machine=rates, results=results)
    return 0


def _train_iter(args) -> int:
    size = args.size or TRAIN_ITER_SIZES[args.head]
    if args.case:
        head, key, file = json.loads(args.case)
        config = file or train_iter_config(head, key)  # constructed: built in this process
        print(json.dumps(train_iteration_case(config, size, args.iters, args.threads,
                                              args.profile)))
        return 0
    models = TRAIN_ITER_CONFIGS[args.head]
    try:  # our files are looked up here, where the checkout is; constructed ones in the case
        files = {key: None if models[key][1] == 'constructed' else
                 train_iter_config(args.head, key) for key in args.models}
    except FileNotFoundError as err:
        raise SystemExit(f'benchmark.py train-iter: {err}')
    rates = _print_machine(args.threads, args.thp)
    print(f'{args.head}: one training iteration, batch 1, {size[0]}x{size[1]}, median of '
          f'{args.iters} after a warm-up')
    for key in args.models:
        if models[key][1] == 'constructed':
            base = SWIN_T_CONSTRUCTED[args.head][0]
            print(f'{models[key][0]}: constructed (the toolbox ships no Swin-T config of this '
                  f"head): {base} with the toolbox's Swin-T backbone")
    results = {}
    for key in args.models:
        name, config = models[key]
        proc = _run_case(['train-iter', '--size', *map(str, size), '--iters',
                          str(args.iters), '--threads', str(args.threads), '--profile',
                          str(args.profile)], [args.head, key, files[key]], args.thp)
        if proc.returncode:
            raise RuntimeError(f'{name} ({config}) failed ({_failure(proc)}):\n'
                               f'{proc.stderr[-3000:]}')
        results[key] = r = json.loads(proc.stdout.strip().splitlines()[-1])
        r.update(name=name, config=SWIN_T_CONSTRUCTED[args.head][0] + ' + Swin-T'
                 if config == 'constructed' else config, constructed=config == 'constructed',
                 wall_s=r['fwd_s'] + r['bwd_s'])
        r['gflops_per_s'] = r['gflop'] / r['wall_s']
        for part in ('forward', 'backward'):
            if r.get(f'profile_{part}'):
                print(f'\n{name}: top operators, {part}\n{r[f"profile_{part}"]}', flush=True)
        if r.get('matrix_product_share'):
            print(f'{name}: matrix products {r["matrix_product_share"]:.0%} of the profiled '
                  'iteration', flush=True)
    width = max(27, *(len(r['name']) for r in results.values()))
    print(f'\n{"model":{width}s} {"params":>7s} {"GFLOP":>7s} {"fwd s":>6s} {"bwd s":>6s} '
          f'{"wall s":>6s} {"GFLOP/s":>7s} {"peak GiB":>9s} {"load":>5s}  vs Swin-T: time, '
          'work, memory')
    ref = results.get('swin_t')
    for key, r in results.items():
        line = (f'{r["name"]:{width}s} {r["params_m"]:6.1f}M {r["gflop"]:7.0f} '
                f'{r["fwd_s"]:6.1f} {r["bwd_s"]:6.1f} {r["wall_s"]:6.1f} '
                f'{r["gflops_per_s"]:7.1f} {r["peak_gib"]:9.2f} {r["load_1min"]:5.1f}')
        if ref and key != 'swin_t':
            r['time_ratio'] = r['wall_s'] / ref['wall_s']
            r['work_ratio'] = r['gflop'] / ref['gflop']
            r['memory_ratio'] = r['peak_gib'] / ref['peak_gib']
            line += f'  {r["time_ratio"]:.2f}, {r["work_ratio"]:.2f}, {r["memory_ratio"]:.2f}'
        print(line)
    print(f'load average at the end {" ".join(f"{v:.2f}" for v in os.getloadavg())}')
    _write_json(args.json, head=args.head, size=list(size), threads=args.threads,
                iters=args.iters, machine=rates, results=results)
    return 0


def _cls_step(args) -> int:
    print(f'torch {torch.__version__}, {torch.get_num_threads()} CPU threads')
    for config in args.configs:
        r = classification_step_case(config, args.batch_size, args.size, args.warmup,
                                     args.iters)
        print(f'{osp.basename(config)}: batch {args.batch_size} x {r["size"]}x{r["size"]}: '
              f'{r["median"]:.2f} s/iter median of {args.iters} '
              f'(min {r["min"]:.2f}, max {r["max"]:.2f}); last loss {r["loss"]:.3f}; peak '
              f'{r["peak_gib"]:.2f} GiB')
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ['compare']:  # this checkout against a git ref (benchmarks.compare)
        from .compare import main as compare
        return compare(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == 'backbone':
        if args.warmup < 0 or args.runs < 1 or args.batch < 1 or args.profile < 0 or \
                args.rounds < 1:
            parser.error('--warmup and --profile must be >= 0, --runs, --rounds and --batch '
                         '>= 1')
        return _backbone(args)
    if args.command == 'train-iter':
        if args.threads < 1 or args.iters < 1 or args.profile < 0 or \
                (args.size and min(args.size) < 64):
            parser.error('--threads and --iters must be >= 1, --profile >= 0, --size >= 64')
        return _train_iter(args)
    return _cls_step(args)


if __name__ == '__main__':
    sys.exit(main())
