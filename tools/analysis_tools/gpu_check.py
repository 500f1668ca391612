"""Summarise `make gpu-check`: one table of the GPU checks from pytest's JUnit XML.

The checks are the tests marked ``gpu`` (tests/test_gpu/). `make gpu-check` runs them,
``pytest tests/test_gpu -m gpu --junitxml=outputs/gpu_check.xml``, then this script:

    python tools/analysis_tools/gpu_check.py outputs/gpu_check.xml --out outputs/gpu_check.json \
        [--setup-seconds S] [--pytest-exit RC]

It prints a header (versions, GPUs, mmcv's build, the sizes: the properties the environment
test records), one row per test (check, subject, PASS/FAIL/SKIP, seconds, the row's result
text, the skip reason, or the failure), the CvT-13 / Swin-T train-step ratios, and a summary
line, and writes all of it with each row's recorded numbers as JSON. The exit status is 1 when
a test failed or pytest did not finish (no XML, or an exit status other than 0 and 1).
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import re
import sys
import xml.etree.ElementTree as ET

PASS, FAIL, SKIP = 'PASS', 'FAIL', 'SKIP'
# (check, numerator subject, denominator subject, label) of the ratios printed after the table.
RATIOS = [('train_step', 'MaskRCNN-CvT13', 'MaskRCNN-SwinT-mmdet', 'Mask R-CNN CvT-13 / Swin-T')]


def _value(text: str):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _one_line(text: str, limit: int = 240) -> str:
    line = next((s.strip() for s in (text or '').splitlines() if s.strip()), '')
    return line.replace('|', '/')[:limit]


def read_junit(path: str) -> tuple:
    """(rows, seconds the tests took) from a JUnit XML written by pytest."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == 'testsuite' else root.findall('testsuite')
    rows = []
    for case in (c for s in suites for c in s.iter('testcase')):
        name = case.get('name', '')
        match = re.fullmatch(r'(?:test_)?([^[]*)(?:\[(.*)\])?', name)
        props = {p.get('name'): _value(p.get('value')) for p in case.iter('property')}
        result = props.pop('result', '')
        status, reason = PASS, ''
        for tag in ('failure', 'error'):
            bad = case.find(tag)
            if bad is not None:
                status = FAIL
                reason = _one_line(bad.get('message') or bad.text)
        skipped = case.find('skipped')
        if status == PASS and skipped is not None:
            status, reason = SKIP, _one_line(skipped.get('message') or skipped.text)
        text = ' / '.join(filter(None, [str(result).replace('|', '/') if result else '', reason]))
        rows.append(dict(check=match.group(1), subject=match.group(2) or '', status=status,
                         seconds=round(float(case.get('time') or 0), 1), result=text,
                         test=f'{case.get("classname", "")}::{name}', numbers=props))
    return rows, sum(float(s.get('time') or 0) for s in suites)


def header(environment: dict | None) -> list:
    if not environment:
        return ['environment: not recorded (test_environment did not run)']
    e = environment
    gpus = e.get('gpus') or []
    plan = e.get('plan', {})
    size = 'x'.join
    return [
        f'device {e["device"]}: python {e["python"]}, torch {e["torch"]} (CUDA '
        f'{e["torch_cuda"]}), '
        + (f'{len(gpus)} x {", ".join(sorted(set(gpus)))}' if gpus else 'no GPU')
        + f', {e["cpus"]} CPUs',
        f'mmcv {e["mmcv"]} (ops: {e["mmcv_compiler"]}, CUDA {e["mmcv_cuda"]}), mmengine '
        f'{e["mmengine"]}, mmdet {e["mmdet"]}, mmseg {e["mmseg"]}, mmpretrain {e["mmpretrain"]}',
        f'sizes: parity {size(map(str, plan["parity_shape"]))}, sdpa '
        f'{size(map(str, plan["sdpa_shape"]))}, det {size(map(str, plan["det_shape"]))}, seg '
        f'{size(map(str, plan["seg_shape"]))}, train {plan["warmup_steps"]} warm-up + '
        f'{plan["timed_steps"]} timed steps{" AMP" if plan["amp"] else ""}'
        if plan else 'sizes: not recorded']


def ratios(rows: list) -> dict:
    found = {}
    by_key = {(r['check'], r['subject']): r['numbers'] for r in rows if r['status'] == PASS}
    for check, num, den, label in RATIOS:
        a, b = by_key.get((check, num)), by_key.get((check, den))
        if a and b and a.get('median_s') and b.get('median_s'):
            found[label] = dict(time=a['median_s'] / b['median_s'])
            if a.get('peak_gib') and b.get('peak_gib'):
                found[label]['peak_memory'] = a['peak_gib'] / b['peak_gib']
    return found


def table(rows: list) -> str:
    heads = ('check', 'subject', 'status', 'seconds', 'result')
    cells = [(r['check'], r['subject'], r['status'], f'{r["seconds"]:.1f}', r['result'])
             for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads[:-1])]
    lines = ['| ' + ' | '.join(h.ljust(w) for h, w in zip(heads, widths + [0])) + ' |',
             '|' + '|'.join('-' * (w + 2) for w in widths + [6]) + '|']
    lines += ['| ' + ' | '.join(c.ljust(w) for c, w in zip(cell, widths + [0])) + ' |'
              for cell in cells]
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('junit', help='the JUnit XML of `pytest -m gpu --junitxml=...`')
    parser.add_argument('--out', default=osp.join('outputs', 'gpu_check.json'),
                        help='where the JSON report goes (default: %(default)s)')
    parser.add_argument('--setup-seconds', type=float, default=None,
                        help='time the environment setup took, to show in the report')
    parser.add_argument('--pytest-exit', type=int, default=None,
                        help="pytest's exit status (0 all passed, 1 some failed; others: it "
                             "did not finish)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows, seconds, problems = [], 0.0, []
    if osp.isfile(args.junit):
        rows, seconds = read_junit(args.junit)
    else:
        problems.append(f'no test results: {args.junit} is missing')
    if args.pytest_exit not in (None, 0, 1):
        problems.append(f'pytest exited with {args.pytest_exit}'
                        + (' (no test selected)' if args.pytest_exit == 5 else ''))
    environment = next((r['numbers']['environment'] for r in rows
                        if isinstance(r['numbers'].get('environment'), dict)), None)
    found = ratios(rows)
    counts = {s: sum(r['status'] == s for r in rows) for s in (PASS, FAIL, SKIP)}
    summary = (f'{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped; '
               f'checks took {seconds:.0f} s')
    if args.setup_seconds is not None:
        summary += f', setup {args.setup_seconds:.0f} s'
    print('\ngpu-check: ' + '\n'.join(header(environment)))
    print(table(rows))
    for label, r in found.items():
        print(f'{label} train step: time {r["time"]:.2f}'
              + (f', peak memory {r["peak_memory"]:.2f}' if 'peak_memory' in r else ''))
    for problem in problems:
        print(f'gpu-check: {problem}')
    print(summary)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(dict(environment=environment, rows=rows, ratios=found, summary=summary,
                       problems=problems, checks_seconds=seconds,
                       setup_seconds=args.setup_seconds, pytest_exit=args.pytest_exit,
                       junit=args.junit), f, indent=1)
    print(f'report: {args.out}')
    return 1 if counts[FAIL] or problems else 0


if __name__ == '__main__':
    sys.exit(main())
