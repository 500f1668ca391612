"""``benchmark.py compare REF``: the same cases timed in this checkout and in a git ref (checked
out as a worktree), alternated in one run, with the ratio of each case and its spread over the
rounds, and a flag on each case that got slower by more than the noise.

Each case runs in a process of its own (:mod:`benchmarks.compare_case`, run as a script with
the tree's root first on ``PYTHONPATH``, under the launchers' allocator setting), so both trees
are timed by the same measuring code. Round ``r`` runs every case in both trees, the ref first
in even rounds and this checkout first in odd ones, so that a drift of the machine's speed
during the run falls on both sides.

**The flag.** A case is flagged as slower when its median ratio (this checkout over the ref) is
above ``1 + threshold`` and every round's ratio is above 1: slower each time, and by more than
the noise. ``--threshold`` defaults to :data:`THRESHOLD`, from A/A runs (this checkout against
itself, docs/benchmarks.md "Comparing two trees"). Exit status 1 when a case is flagged.

Example::

    python tools/analysis_tools/benchmark.py compare 6b2cf9c --cases cmt_s-infer-800x1333
    python tools/analysis_tools/benchmark.py compare main --rounds 5 --json compare.json
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

from .cases import REPO, default_threads
from .compare_case import CASES
from .measure import machine_rates

__all__ = ['THRESHOLD', 'main']

#: Default flag threshold: a case's median ratio above 1.05 (and above 1 in every round).
THRESHOLD = 0.05
CASE_SCRIPT = osp.join(REPO, 'benchmarks', 'compare_case.py')
CPU_MALLOC = osp.join(REPO, 'tools', 'misc', 'cpu_malloc.sh')


def run_case(tree: str, case: str, runs: int, threads: int) -> dict:
    """Time ``case`` with cvt_mm imported from ``tree``; its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = osp.join(tmp, 'result.json')
        env = dict(os.environ, PYTHONPATH=tree, COMPARE_RUNS=str(runs),
                   COMPARE_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        proc = subprocess.run(['bash', CPU_MALLOC, sys.executable, CASE_SCRIPT, case, out],
                              cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f'{case} in {tree} failed:\n{proc.stderr[-3000:]}')
        with open(out) as f:
            result = json.load(f)
    if osp.realpath(result['tree']) != osp.realpath(tree):
        raise RuntimeError(f'{case}: cvt_mm was imported from {result["tree"]}, not {tree}')
    return result


def summarise(times: Dict[str, Dict[str, List[dict]]], threshold: float) -> List[dict]:
    """Per case: the medians of each side, each round's ratio, their median and whether the
    case is flagged (see the module doc)."""
    rows = []
    for case, sides in times.items():
        ratios = [c['seconds'] / r['seconds'] for r, c in zip(sides['ref'], sides['current'])]
        median = statistics.median(ratios)
        rows.append(dict(
            case=case, ratio=median, ratio_min=min(ratios), ratio_max=max(ratios),
            ratios=ratios,
            ref_s=statistics.median(r['seconds'] for r in sides['ref']),
            current_s=statistics.median(c['seconds'] for c in sides['current']),
            ref_mib=max(r['peak_mib'] for r in sides['ref']),
            current_mib=max(c['peak_mib'] for c in sides['current']),
            slower=median > 1 + threshold and min(ratios) > 1))
    return rows


def _worktree(ref: str, folder: str) -> str:
    path = osp.join(folder, 'ref')
    subprocess.run(['git', '-C', REPO, 'worktree', 'add', '--detach', '--quiet', path, ref],
                   check=True)
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='benchmark.py compare', description=__doc__.split(
        '\n\n')[0])
    parser.add_argument('ref', nargs='?', help='the git ref to compare this checkout with')
    parser.add_argument('--cases', nargs='+', help='case names (default: all); see --list')
    parser.add_argument('--list', action='store_true', help='print the case names and exit')
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds (default 3)')
    parser.add_argument('--runs', type=int, default=3,
                        help='timed runs per case and round after one warm-up (default 3)')
    parser.add_argument('--threads', type=int, default=default_threads())
    parser.add_argument('--threshold', type=float, default=THRESHOLD,
                        help=f'flag a median ratio above 1 + this (default {THRESHOLD})')
    parser.add_argument('--json', help='write the rows and every run here')
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    names = list(CASES)
    if args.list:
        print('\n'.join(names))
        return 0
    if not args.ref:
        parser.error('name the git ref to compare with (e.g. main, HEAD~3, 6b2cf9c)')
    cases = args.cases or names
    unknown = sorted(set(cases) - set(names))
    if unknown:
        parser.error(f'unknown cases {unknown}; known: {", ".join(names)}')
    if args.rounds < 2 or args.runs < 1 or args.threads < 1:
        parser.error('--rounds must be >= 2 (a spread needs two), --runs and --threads >= 1')
    rates = machine_rates(args.threads)
    print(f'machine: fp32 GEMM {rates["gemm_gflops_per_s"]:.0f} GFLOP/s, {args.threads} threads')
    times = {case: dict(ref=[], current=[]) for case in cases}
    with tempfile.TemporaryDirectory() as folder:
        ref_tree = _worktree(args.ref, folder)
        try:
            for r in range(args.rounds):
                order = ('ref', 'current') if r % 2 == 0 else ('current', 'ref')
                for case in cases:
                    for side in order:
                        tree = ref_tree if side == 'ref' else REPO
                        times[case][side].append(run_case(tree, case, args.runs, args.threads))
                print(f'round {r + 1}/{args.rounds} done', flush=True)
        finally:
            subprocess.run(['git', '-C', REPO, 'worktree', 'remove', '--force', ref_tree])
    rows = summarise(times, args.threshold)
    print(f'\nthis checkout over {args.ref}: median ratio [lowest, highest of {args.rounds} '
          f'rounds]; flagged: median > {1 + args.threshold:.2f} and every round > 1')
    print(f'{"case":28} {"ref s":>8} {"this s":>8} {"ratio":>6} {"spread":>14} '
          f'{"ref MiB":>8} {"this MiB":>8}')
    for row in rows:
        print(f'{row["case"]:28} {row["ref_s"]:8.3f} {row["current_s"]:8.3f} '
              f'{row["ratio"]:6.3f} [{row["ratio_min"]:.3f}, {row["ratio_max"]:.3f}] '
              f'{row["ref_mib"]:8.0f} {row["current_mib"]:8.0f}'
              f'{"  SLOWER" if row["slower"] else ""}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(ref=args.ref, machine=rates, rows=rows, runs=times), f, indent=1)
    return 1 if any(row['slower'] for row in rows) else 0
