"""The FLOPs and parameters of every config under ``configs/`` beside the papers' numbers, as a
Markdown table (docs/model_zoo.md), counted by :func:`cvt_mm.apis.flops.get_flops` (what
``tools/analysis_tools/get_flops.py`` prints). A maintainers' script: it writes the docs.

    python .dev_scripts/flops_table.py            # every config: prints the table
    python .dev_scripts/flops_table.py configs/imagenet_cmt_ti_800e_in1k.py
    python .dev_scripts/flops_table.py --write    # and updates the committed copies
    python .dev_scripts/flops_table.py --sync     # metafiles, READMEs from the docs
    python .dev_scripts/flops_table.py --explain configs/mask_rcnn_cmt_s_coco.py

Each config is counted at its paper's input: detection at 1280x800 (H x W, the input of
MMDetection's ``get_flops.py`` and of the papers' detection FLOPs), segmentation at 512x2048
(MMSegmentation's convention for ADE20K), classification at the test crop of the config (the
model's ImageNet resolution: CvT 224, CMT-Ti 160, XS 192, S 224, B 256). Two counts per config:
ours (:func:`cvt_mm.apis.flops.count_flops`, attention included) and mmcv's module-hook counter
(MMDetection 2.x's tool, which the papers' detection numbers come from: no attention matrix
products). Parameters are the trainable ones.

``--write`` replaces the table in docs/model_zoo.md, the ``FLOPs``/``Parameters`` of each model in
``configs/*/metafile.yml`` and the results tables of ``configs/*/README.md`` (rendered from the
metafiles), each between its ``<!-- ... -->`` markers; ``--sync`` does the last two from the
committed table without counting anything. ``--explain`` counts one config again
with one thing changed at a time (attention left out, position-bias resize left out, H and W
swapped, backbone alone, mmcv's counter) to account for a gap to a paper.
"""
from __future__ import annotations

import argparse
import glob
import logging
import os.path as osp
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from cvt_mm.apis.builders import build_model_from_config, load_config, task_of
from cvt_mm.apis.flops import TensorForward, count_flops, get_flops, mmcv_gmacs, tensor_forward

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DOCS = osp.join(ROOT, 'docs', 'model_zoo.md')
DET_SHAPE = (1280, 800)
SEG_SHAPE = (512, 2048)
TABLE_MARKERS = ('<!-- flops-table:start -->', '<!-- flops-table:end -->')
ZOO_MARKERS = ('<!-- model-zoo-table:start -->', '<!-- model-zoo-table:end -->')
COLUMNS = ('config', 'input (H×W)', 'GFLOPs (ours)', 'GFLOPs (mmcv counter)',
           'GFLOPs (paper)', 'params M (ours)', 'params M (paper)', 'note')


@dataclass(frozen=True)
class PaperNumbers:
    """A paper's numbers for a config's model: GFLOPs (multiply-adds), params (M), where."""
    gflops: Optional[float]
    params: Optional[float]
    source: str


CVT = 'CvT (Wu et al., ICCV 2021)'
CMT = 'CMT (Guo et al., CVPR 2022)'
# Keyed by config file name. CvT Table 2 gives 4.53 G / 19.98 M and 7.13 G / 31.54 M (Table 3
# rounds them to 4.5 / 20 and 7.1 / 32). CMT: S from Table 8 (4.04 B, 25.1 M); Ti/XS/B from
# Table 3 as quoted by the project (not re-read from the paper text here); detection from
# Tables 6 (RetinaNet) and 7 (Mask R-CNN), "FLOPs are calculated on 1280x800 input".
PAPER_NUMBERS: Dict[str, PaperNumbers] = {
    'imagenet_cvt13_300e_in1k.py': PaperNumbers(4.53, 19.98, f'{CVT}, Table 2'),
    'imagenet_cvt21_300e_in1k.py': PaperNumbers(7.13, 31.54, f'{CVT}, Table 2'),
    'imagenet_cmt_ti_800e_in1k.py': PaperNumbers(0.6, 9.5, f'{CMT}, Table 3'),
    'imagenet_cmt_xs_400e_in1k.py': PaperNumbers(1.5, 15.2, f'{CMT}, Table 3'),
    'imagenet_cmt_s_300e_in1k.py': PaperNumbers(4.04, 25.1, f'{CMT}, Table 8'),
    'imagenet_cmt_b_300e_in1k.py': PaperNumbers(9.3, 45.7, f'{CMT}, Table 3'),
    'mask_rcnn_cmt_s_coco.py': PaperNumbers(249, 44.5, f'{CMT}, Table 7'),
    'mask_rcnn_cmt_s_ms-3x_coco.py': PaperNumbers(249, 44.5, f'{CMT}, Table 7 (the 1x model)'),
    'retinanet_cmt_s_coco.py': PaperNumbers(231, 44.3, f'{CMT}, Table 6'),
}
# Said once per row where it applies (beside the measured gap).
EXTRA_NOTES = {
    'retinanet_cmt_s_coco.py': 'paper\'s 44.3 M params equal its AP and near its Mask R-CNN '
                               '44.5 M: likely a slip (PVT-S RetinaNet: 34.2 M)',
}


@dataclass
class FlopsRow:
    """One config's counts. GFLOPs are multiply-adds; params in millions (trainable)."""
    config: str
    shape: Tuple[int, int]
    gflops: float
    mmcv_gflops: float
    attention: float
    params: float
    published: Optional[PaperNumbers] = None


def list_configs(root: str = ROOT) -> List[str]:
    """Every model config under ``configs/`` (not ``configs/demo/`` nor ``_base_``), as
    repository-relative paths, sorted."""
    paths = glob.glob(osp.join(root, 'configs', '**', '*.py'), recursive=True)
    rel = (osp.relpath(p, root) for p in paths)
    return sorted(p for p in rel if not ({'demo', '_base_'} & set(p.split(osp.sep))))


def paper_shape(cfg) -> Tuple[int, int]:
    """(H, W) a config is counted at: see the module docstring."""
    task = task_of(cfg)
    if task == 'mmdet':
        return DET_SHAPE
    if task == 'mmseg':
        return SEG_SHAPE
    crops = [t['crop_size'] for t in cfg.test_pipeline if t['type'] == 'CenterCrop']
    if not crops:
        raise ValueError('a classification config needs a CenterCrop in its test_pipeline')
    crop = crops[-1]
    return (crop, crop) if isinstance(crop, int) else tuple(crop)


def fmt_gflops(x: Optional[float]) -> str:
    """Two decimals under 10 G, one above: the precision the papers quote."""
    if x is None:
        return '–'
    return f'{x:.2f}' if x < 10 else f'{x:.1f}'


def fmt_params(x: Optional[float]) -> str:
    return '–' if x is None else f'{x:.2f}'


def fmt_published(x: Optional[float]) -> str:
    """A paper's number as the paper prints it (its own precision)."""
    return '–' if x is None else f'{x:g}'


def measure(config: str) -> FlopsRow:
    """Count one config at its paper's input with :func:`get_flops` (ours and mmcv's counter).

    Args:
        config (str): config file, relative to the repository root or absolute.

    Returns:
        FlopsRow: the counts, with the paper's numbers where :data:`PAPER_NUMBERS` has them.

    Example::

        >>> row = measure('configs/imagenet_cmt_ti_800e_in1k.py')
        >>> row.shape, round(row.gflops, 2), round(row.params, 2)
        ((160, 160), 0.64, 9.49)
    """
    path = config if osp.isabs(config) else osp.join(ROOT, config)
    cfg = load_config(path)
    shape = paper_shape(cfg)
    r = get_flops(cfg, shape, mmcv=True)
    rel = osp.relpath(path, ROOT)
    return FlopsRow(rel, shape, r['flops'], r['mmcv_flops'], r['attention_flops'], r['params'],
               PAPER_NUMBERS.get(osp.basename(rel)))


def _versus(ours: float, paper: float) -> str:
    """``ours`` against a paper's number: equal at the paper's precision (its number of
    decimals), or the difference in percent."""
    decimals = len(repr(float(paper)).split('.')[1].rstrip('0'))
    if abs(ours - paper) <= 0.5 * 10 ** -decimals + 1e-9:
        return '= paper'
    percent = 100 * (ours / paper - 1)
    return f'{percent:+.1f} %' if abs(percent) < 10 else f'{percent:+.0f} %'


def note(row: FlopsRow) -> str:
    """What explains the row's numbers against the paper, from the counts themselves."""
    parts = []
    if row.attention >= 0.05 * row.gflops:
        parts.append(f'attention {fmt_gflops(row.attention)} G '
                     f'({100 * row.attention / row.gflops:.0f} %)')
    pub = row.published
    if pub is not None and pub.gflops is not None:
        ours, theirs = float(fmt_gflops(row.gflops)), float(fmt_gflops(row.mmcv_gflops))
        parts.append(f'FLOPs: ours {_versus(ours, pub.gflops)}, '
                     f'mmcv counter {_versus(theirs, pub.gflops)}')
    if pub is not None and pub.params is not None:
        parts.append(f'params {_versus(float(fmt_params(row.params)), pub.params)}')
    if pub is not None:
        parts.append(pub.source)
    extra = EXTRA_NOTES.get(osp.basename(row.config))
    if extra:
        parts.append(extra)
    return '; '.join(parts)


def format_table(rows: Sequence[FlopsRow]) -> str:
    """The Markdown table (header and one line per row), with a trailing newline."""
    lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
    for row in rows:
        pub = row.published or PaperNumbers(None, None, '')
        cells = [f'`{row.config}`', f'{row.shape[0]}×{row.shape[1]}', fmt_gflops(row.gflops),
                 fmt_gflops(row.mmcv_gflops), fmt_published(pub.gflops), fmt_params(row.params),
                 fmt_published(pub.params), note(row)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def parse_table(text: str) -> Dict[str, Dict[str, str]]:
    """``{config: {column: cell}}`` of the table between the markers in ``text``."""
    start, end = (text.index(m) for m in TABLE_MARKERS)
    rows = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == len(COLUMNS) and cells[0].startswith('`configs/'):
            rows[cells[0].strip('`')] = dict(zip(COLUMNS, cells))
    return rows


def replace_between(text: str, markers: Tuple[str, str], body: str) -> str:
    """``text`` with what lies between the two marker lines replaced by ``body``."""
    start, end = text.index(markers[0]), text.index(markers[1])
    return text[:start + len(markers[0])] + '\n' + body + text[end:]


# ------------------------------------------------------------------ metafiles and READMEs
def metafiles(root: str = ROOT) -> List[str]:
    """The metafiles ``model-index.yml`` imports, as absolute paths."""
    import yaml
    with open(osp.join(root, 'model-index.yml')) as f:
        return [osp.join(root, p) for p in yaml.safe_load(f)['Import']]


def metafile_numbers(table: Dict[str, Dict[str, str]], config: str) -> Tuple[int, int]:
    """(FLOPs, Parameters) a metafile states for ``config``: the docs table's numbers as
    integers, as MMPretrain's metafiles write them."""
    row = table[config]
    return (round(float(row['GFLOPs (ours)']) * 1e9),
            round(float(row['params M (ours)']) * 1e6))


def update_metafile_text(text: str, table: Dict[str, Dict[str, str]]) -> str:
    """Set each model's ``FLOPs:`` and ``Parameters:`` (in its ``Metadata``, after its
    ``Config:`` line) from the docs table."""
    out, config = [], None
    for line in text.splitlines(keepends=True):
        m = re.match(r'\s*Config:\s*(\S+)', line)
        if m:
            config = m.group(1)
        m = re.match(r'(\s*)(FLOPs|Parameters):\s*\S+', line)
        if m and config in table:
            flops, params = metafile_numbers(table, config)
            value = flops if m.group(2) == 'FLOPs' else params
            line = f'{m.group(1)}{m.group(2)}: {value}\n'
        out.append(line)
    return ''.join(out)


TASKS = (('mask_rcnn', 'Instance Segmentation'), ('retinanet', 'Object Detection'),
         ('upernet', 'Semantic Segmentation'), ('imagenet', 'Image Classification'),
         ('cascade_mask_rcnn', 'Instance Segmentation'), ('dino', 'Object Detection'),
         ('sem_fpn', 'Semantic Segmentation'))


def task_name(config: str) -> str:
    """The task a config file name stands for (Mask2Former: by its dataset)."""
    if config.startswith('mask2former'):
        return 'Semantic Segmentation' if '_ade20k' in config else 'Instance Segmentation'
    return next(t for prefix, t in TASKS if config.startswith(prefix))


def render_zoo_table(metafile: str) -> str:
    """The results table of a family README, rendered from its metafile: one line per model
    with the published results (the paper's, none of ours), its status and its FLOPs and
    parameters."""
    from modelindex.load_model_index import load
    index = load(metafile)
    lines = ['| config | task | published result (paper) | status | GFLOPs | params M |',
             '|---|---|---|---|---|---|']
    for model in index.models:
        meta = model.metadata.data
        name = osp.basename(model.config)
        task = task_name(name)
        results = '; '.join(
            f'{result.dataset} ' + ', '.join(f'{k} {v}' for k, v in result.metrics.items())
            for result in (model.results or [])) or '–'
        lines.append(f'| [{name}](../../{model.config}) | {task} | {results} | '
                     f'{meta["Status"]} | {fmt_gflops(meta["FLOPs"] / 1e9)} | '
                     f'{fmt_params(meta["Parameters"] / 1e6)} |')
    return '\n'.join(lines) + '\n'


def _rewrite(path: str, update) -> bool:
    """Apply ``update`` (text -> text) to a file; True if it changed."""
    with open(path) as f:
        old = f.read()
    new = update(old)
    if new != old:
        with open(path, 'w') as f:
            f.write(new)
    return new != old


def write_outputs(rows: Sequence[FlopsRow], root: str = ROOT) -> List[str]:
    """Update docs/model_zoo.md (the measured rows; other configs keep their committed
    line), then each metafile's numbers from that table and each family README's table from
    its metafile. Returns the files that changed."""
    docs = osp.join(root, 'docs', 'model_zoo.md')
    with open(docs) as f:
        merged = parse_table(f.read())
    fresh = format_table(rows).splitlines()[2:]
    merged.update(parse_table('\n'.join([TABLE_MARKERS[0], *fresh, TABLE_MARKERS[1]])))
    table = format_table([]) + ''.join(
        '| ' + ' | '.join(merged[c][col] for col in COLUMNS) + ' |\n' for c in sorted(merged))
    changed = [docs] if _rewrite(docs, lambda t: replace_between(t, TABLE_MARKERS, table)) \
        else []
    for meta in metafiles(root):
        if _rewrite(meta, lambda t: update_metafile_text(t, merged)):
            changed.append(meta)
        readme = osp.join(osp.dirname(meta), 'README.md')
        if _rewrite(readme, lambda t: replace_between(t, ZOO_MARKERS, render_zoo_table(meta))):
            changed.append(readme)
    return changed


# ------------------------------------------------------------------------------ --explain
def explain(config: str, shape: Optional[Tuple[int, int]] = None) -> List[Tuple[str, float]]:
    """One config counted with one thing changed at a time: ``[(what, GFLOPs), ...]``.

    Args:
        config (str): config file.
        shape (tuple[int, int], optional): (H, W); default: the config's paper input.

    Example::

        >>> for what, g in explain('configs/mask_rcnn_cmt_s_coco.py'):
        ...     print(f'{g:7.1f}  {what}')
    """
    cfg = load_config(config)
    task = task_of(cfg)
    shape = tuple(shape or paper_shape(cfg))
    model = build_model_from_config(cfg).eval()
    forward = tensor_forward
    with torch.no_grad():
        cold = count_flops(forward(model, task, shape))
        # Eval mode keeps CMT's resized position biases per input size: a second forward at
        # the same size skips the resize.
        warm = count_flops(forward(model, task, shape))
        swapped = count_flops(forward(model, task, shape[::-1]))
        backbone = count_flops(model.backbone, torch.randn(1, 3, *shape))
        mmcv_whole = mmcv_gmacs(
            TensorForward(model, task, shape), shape)
        mmcv_backbone = mmcv_gmacs(model.backbone, shape)

    def attention(count):
        return count.gmacs * count.attention_share()

    h, w = shape
    return [
        (f'whole model at {h}x{w} (get_flops: attention and position-bias resize counted)',
         cold.gmacs),
        ('  without attention matrix products', cold.gmacs - attention(cold)),
        ('  without the position-bias resize (second forward, resize cached)', warm.gmacs),
        ('  without both', warm.gmacs - attention(warm)),
        (f'  H and W swapped ({w}x{h})', swapped.gmacs),
        ('backbone alone', backbone.gmacs),
        ('  without attention matrix products', backbone.gmacs - attention(backbone)),
        ('mmcv counter (MMDetection 2.x get_flops), whole model', mmcv_whole),
        ('mmcv counter, backbone alone', mmcv_backbone),
    ]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='FLOPs and parameters of every config beside the papers\' numbers')
    parser.add_argument('configs', nargs='*',
                        help='configs to count (default: every config under configs/, not '
                        'demo/ nor _base_/)')
    parser.add_argument('--write', action='store_true',
                        help='update docs/model_zoo.md, configs/*/metafile.yml and '
                        'configs/*/README.md with the rows counted')
    parser.add_argument('--sync', action='store_true',
                        help='count nothing: update the metafiles and the family READMEs from '
                        'the committed docs/model_zoo.md table')
    parser.add_argument('--explain', metavar='CONFIG',
                        help='count one config with one thing changed at a time')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='input of --explain (default: the config\'s paper input)')
    args = parser.parse_args(argv)
    if args.explain and (args.configs or args.write or args.sync):
        parser.error('--explain takes one config and no other configs nor --write/--sync')
    if args.sync and (args.configs or args.write):
        parser.error('--sync counts nothing: it takes no configs nor --write')
    if args.shape and not args.explain:
        parser.error('--shape only applies to --explain (the table uses each paper\'s input)')
    if args.shape and min(args.shape) < 32:
        parser.error(f'--shape takes H W, each >= 32, got {args.shape}')
    for path in args.configs + ([args.explain] if args.explain else []):
        if not osp.isfile(path):
            parser.error(f'no config file {path}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # Model building logs every parameter's initialisation at INFO: keep the output a table.
    from mmengine.logging import MMLogger
    MMLogger.get_current_instance().setLevel(logging.WARNING)
    if args.sync:
        for path in write_outputs([]):
            print(f'updated {osp.relpath(path, ROOT)}', file=sys.stderr)
        return 0
    if args.explain:
        for what, gflops in explain(args.explain, args.shape):
            print(f'{gflops:8.1f}  {what}')
        return 0
    configs = args.configs or list_configs()
    rows = []
    for config in configs:
        rows.append(measure(osp.abspath(config)))
        print(f'counted {rows[-1].config}', file=sys.stderr, flush=True)
    print(format_table(rows), end='')
    if args.write:
        for path in write_outputs(rows):
            print(f'updated {osp.relpath(path, ROOT)}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
