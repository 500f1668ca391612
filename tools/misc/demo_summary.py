"""The last stage of ``make demo``: what the demo reached, and whether docs/demo.md says so.

Prints the pretraining's top-1, Mask R-CNN's COCO APs and UperNet's mIoU from the runs'
outputs, lists the pictures, then compares the final metrics with the numbers that
docs/demo.md (and README.md, which a test keeps equal to it) states for the full demo. A
difference is expected on another CPU (other floating-point kernels, docs/demo.md#reproducible)
or with other ``DEMO_*`` sizes; on the page's machine with the default sizes it means a change
moved the arithmetic, and the page must be updated with it.

Usage (run_demo.sh runs it)::

    python tools/misc/demo_summary.py PRETRAIN_DIR DET_TEST_DIR SEG_TEST_DIR OUT_DIR
"""
import argparse
import glob
import json
import os.path as osp
import re
import sys

DOCS = osp.join(osp.dirname(osp.abspath(__file__)), '..', '..', 'docs', 'demo.md')
# The bold results of docs/demo.md's table and README.md's demo paragraph (a line may break
# anywhere in them).
PATTERNS = {
    'bbox mAP': r'\*\*bbox\s+mAP\s+(\d\.\d{3})', 'segm mAP': r'segm\s+mAP\s+(\d\.\d{3})\s+\(AP50',
    'mIoU': r'\*\*mIoU\s+(\d+\.\d+)'}


def stated_results(text: str) -> dict:
    """The demo's final metrics as a page states them: ``{'bbox mAP': 0.66, ...}``.

    Raises:
        ValueError: a metric is not stated, or stated twice with different values.
    """
    results = {}
    for name, pattern in PATTERNS.items():
        values = {float(v) for v in re.findall(pattern, text)}
        if len(values) != 1:
            raise ValueError(f'the page states {name} {sorted(values) or "nowhere"}; expected one '
                             f'value, in bold as in "**{name} 0.660 (AP50 0.974)**"')
        results[name] = values.pop()
    return results


def _newest(pattern: str) -> str:
    found = sorted(glob.glob(pattern))
    if not found:
        raise FileNotFoundError(f'demo_summary: nothing matches {pattern}')
    return found[-1]


def compare(measured: dict, stated: dict) -> str:
    """One line saying whether ``measured`` rounds to what the page ``stated``."""
    digits = {k: 2 if k == 'mIoU' else 3 for k in stated}  # as the pages print them
    differs = [f'{k} {measured[k]:.{digits[k]}f} (page {stated[k]})' for k in stated
               if round(measured[k], digits[k]) != stated[k]]
    if not differs:
        return 'docs/demo.md: this run gives the numbers the page states'
    return ('docs/demo.md: this run differs: ' + ', '.join(differs) + '. Expected on another '
            'CPU or with other DEMO_* sizes (docs/demo.md#reproducible); on the page\'s machine '
            'with the default sizes, a change moved the arithmetic: update README.md and '
            'docs/demo.md')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    for name in ('pretrain_dir', 'det_test', 'seg_test', 'out'):
        parser.add_argument(name)
    args = parser.parse_args(argv)
    pretrain = [json.loads(line) for line in
                open(_newest(osp.join(args.pretrain_dir, '*', 'vis_data', 'scalars.json')))]
    top1 = [line for line in pretrain if 'accuracy/top1' in line][-1]['accuracy/top1']
    print(f'pretraining: val top-1 {top1:.2f}%')
    coco = json.load(open(_newest(osp.join(args.det_test, '*', '*.json'))))
    for kind in ('bbox', 'segm'):
        print(f'Mask R-CNN {kind}: mAP {coco[f"coco/{kind}_mAP"]:.3f}  '
              f'AP50 {coco[f"coco/{kind}_mAP_50"]:.3f}  AP75 {coco[f"coco/{kind}_mAP_75"]:.3f}')
    seg = json.load(open(_newest(osp.join(args.seg_test, '*', '*.json'))))
    print(f'UperNet: mIoU {seg["mIoU"]:.2f}  mAcc {seg["mAcc"]:.2f}  aAcc {seg["aAcc"]:.2f}')
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
    measured = {'bbox mAP': coco['coco/bbox_mAP'], 'segm mAP': coco['coco/segm_mAP'],
                'mIoU': seg['mIoU']}
    with open(DOCS, encoding='utf-8') as f:
        print(compare(measured, stated_results(f.read())))


if __name__ == '__main__':
    sys.exit(main())
