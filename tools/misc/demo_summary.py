"""The last stage of ``make demo``: what the demo reached, and whether docs/demo.md says so.

Prints the pretraining's top-1, Mask R-CNN's COCO APs and UperNet's mIoU from the runs'
outputs, lists the pictures, then compares every number that docs/demo.md states in bold for
the full demo (bbox and segm mAP, AP50, AP75; mIoU, mAcc, aAcc; the pretraining's top-1 after
each epoch) with this run's, to the digits the page prints, and exits 1 naming each that
differs and by how much. README.md states some of them; a test keeps them equal to the page's.

A difference is expected on another CPU (other floating-point kernels, docs/demo.md#reproducible)
or with other ``DEMO_*`` sizes (``DEMO_COMPARE=0 make demo`` then skips the comparison); on
the page's machine with the default sizes it means a change moved the arithmetic, and the page
must be updated with it.

Usage (run_demo.sh runs it)::

    python tools/misc/demo_summary.py PRETRAIN_DIR DET_TEST_DIR SEG_TEST_DIR OUT_DIR \\
        [--page docs/demo.md | --no-compare]
"""
import argparse
import glob
import json
import os.path as osp
import re
import sys

DOCS = osp.join(osp.dirname(osp.abspath(__file__)), '..', '..', 'docs', 'demo.md')
NUMBER = r'(\d+\.\d+)'
# Inside a bold span (a line may break anywhere in it): "bbox mAP 0.710 (AP50 0.990, AP75
# 0.790)", "mIoU 99.61", "top-1 96.0 %, 100.0 %, 100.0 %".
COCO = re.compile(rf'(bbox|segm) mAP {NUMBER}(?: \(AP50 {NUMBER}(?:, AP75 {NUMBER})?\))?')
SEG = re.compile(rf'\b(mIoU|mAcc|aAcc) {NUMBER}')
TOP1 = re.compile(rf'top-1 ({NUMBER} %(?:, {NUMBER} %)*)')


def stated_results(text: str) -> dict:
    """The demo's numbers a page states in bold, as printed: ``{'bbox mAP': '0.710',
    'bbox AP50': '0.990', 'mIoU': '99.61', 'top-1 epoch 3': '100.0', ...}``.

    Raises:
        ValueError: bbox mAP, segm mAP or mIoU is not stated, or a number is stated twice
            with different values.
    """
    stated = {}

    def state(name, value):
        if stated.setdefault(name, value) != value:
            raise ValueError(f'the page states {name} twice: {stated[name]} and {value}')

    for span in re.findall(r'\*\*(.+?)\*\*', text, flags=re.S):
        span = ' '.join(span.split())
        for kind, *values in COCO.findall(span):
            for metric, value in zip(('mAP', 'AP50', 'AP75'), values):
                if value:
                    state(f'{kind} {metric}', value)
        for name, value in SEG.findall(span):
            state(name, value)
        for match in TOP1.finditer(span):
            for epoch, value in enumerate(re.findall(NUMBER, match.group(1)), 1):
                state(f'top-1 epoch {epoch}', value)
    for name in ('bbox mAP', 'segm mAP', 'mIoU'):
        if name not in stated:
            raise ValueError(f'the page states {name} nowhere; expected it in bold, as in '
                             '"**bbox mAP 0.660 (AP50 0.974), segm mAP 0.856 (AP50 0.990)**" '
                             'and "**mIoU 99.59**"')
    return stated


def differences(measured: dict, stated: dict) -> list:
    """``'name value (page value, +difference)'`` for each stated number that ``measured``
    does not round to at the page's digits; a stated number not measured is a difference."""
    found = []
    for name, text in stated.items():
        digits = len(text.split('.')[1])
        if name not in measured:
            found.append(f'{name} not measured (page {text})')
        elif round(measured[name], digits) != float(text):
            found.append(f'{name} {measured[name]:.{digits}f} (page {text}, '
                         f'{measured[name] - float(text):+.{digits}f})')
    return found


def compare(measured: dict, stated: dict) -> str:
    """One line saying whether ``measured`` rounds to every number the page ``stated``."""
    differs = differences(measured, stated)
    if not differs:
        return f'docs/demo.md: this run gives the {len(stated)} numbers the page states'
    return (f'docs/demo.md: this run differs in {len(differs)} of the {len(stated)} numbers '
            'the page states: ' + ', '.join(differs) + '. Expected on another CPU or with '
            'other DEMO_* sizes (docs/demo.md#reproducible; DEMO_COMPARE=0 skips this check); '
            'on the page\'s machine with the default sizes, a change moved the arithmetic: '
            'update README.md and docs/demo.md')


def _newest(pattern: str) -> str:
    found = sorted(glob.glob(pattern))
    if not found:
        raise FileNotFoundError(f'demo_summary: nothing matches {pattern}')
    return found[-1]


def measured_results(pretrain_dir: str, det_test: str, seg_test: str) -> dict:
    """This run's numbers under the names :func:`stated_results` gives them."""
    scalars = _newest(osp.join(pretrain_dir, '*', 'vis_data', 'scalars.json'))
    top1 = [line['accuracy/top1'] for line in map(json.loads, open(scalars))
            if 'accuracy/top1' in line]
    measured = {f'top-1 epoch {epoch}': value for epoch, value in enumerate(top1, 1)}
    coco = json.load(open(_newest(osp.join(det_test, '*', '*.json'))))
    for kind in ('bbox', 'segm'):
        for metric, suffix in (('mAP', ''), ('AP50', '_50'), ('AP75', '_75')):
            measured[f'{kind} {metric}'] = coco[f'coco/{kind}_mAP{suffix}']
    seg = json.load(open(_newest(osp.join(seg_test, '*', '*.json'))))
    measured.update({name: seg[name] for name in ('mIoU', 'mAcc', 'aAcc')})
    return measured


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    for name in ('pretrain_dir', 'det_test', 'seg_test', 'out'):
        parser.add_argument(name)
    parser.add_argument('--page', default=DOCS, help='the page whose bold numbers this run '
                        'must give (default: docs/demo.md)')
    parser.add_argument('--no-compare', action='store_true',
                        help='print the results without comparing them with the page')
    args = parser.parse_args(argv)
    measured = measured_results(args.pretrain_dir, args.det_test, args.seg_test)
    top1 = [measured[k] for k in sorted(measured) if k.startswith('top-1')]
    print('pretraining: val top-1 ' + ', '.join(f'{v:.2f}%' for v in top1) + ' after epochs '
          f'1-{len(top1)}')
    for kind in ('bbox', 'segm'):
        print(f'Mask R-CNN {kind}: ' + '  '.join(
            f'{m} {measured[f"{kind} {m}"]:.3f}' for m in ('mAP', 'AP50', 'AP75')))
    print('UperNet: ' + '  '.join(f'{m} {measured[m]:.2f}' for m in ('mIoU', 'mAcc', 'aAcc')))
    print('pictures:')
    for path in sorted(glob.glob(osp.join(args.out, '*.jpg'))):
        print(f'  {path}')
    segmentation = sorted(glob.glob(osp.join(args.out, 'segmentation', '**', '*.png'),
                                    recursive=True))
    if segmentation:
        print(f'  {osp.dirname(segmentation[0])}/  ({len(segmentation)} ground truth | '
              'prediction pictures of UperNet)')
    for path in sorted(glob.glob(osp.join(args.out, 'curves', '*', '*.png'))):
        print(f'  {path}')
    if args.no_compare:
        print('docs/demo.md: not compared (DEMO_COMPARE=0)')
        return 0
    with open(args.page, encoding='utf-8') as f:
        stated = stated_results(f.read())
    print(compare(measured, stated))
    return 1 if differences(measured, stated) else 0


if __name__ == '__main__':
    sys.exit(main())
