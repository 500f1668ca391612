"""Draw the training curves of a work dir as PNG pictures: losses, learning rate, validation
metrics.

    python tools/analysis_tools/plot_curves.py work_dirs/mask_rcnn_cvt13_coco
    python tools/analysis_tools/plot_curves.py WORK_DIR --out curves/ --keys 'loss*' lr 'coco/*'
    python tools/analysis_tools/plot_curves.py WORK_DIR/20240601_101500/vis_data/scalars.json

Reads what MMEngine's ``LocalVisBackend`` writes (every config of this project has it):
``WORK_DIR/<timestamp>/vis_data/scalars.json``, one JSON object per line. Training lines
carry ``iter`` (the global iteration), ``lr``, ``loss*`` and timings; validation lines carry
the metrics (``coco/bbox_mAP``, ``mIoU``, ``accuracy/top1`` ...) and a ``step`` that is the
epoch (epoch-based training) or the iteration (iteration-based) they were measured at.

Which run: each start of ``tools/train.py`` writes a new ``<timestamp>`` folder. By default
the newest run is drawn together with the runs it resumed (``--resume``): walking back from
the newest, a run is joined to the one before it when its dumped config says ``resume = True``
(or, without a config, when its first logged iteration is later than the earlier run's
first), and the earlier run's lines from that iteration on are dropped, as the resumed run
redid them. ``--run TIMESTAMP`` draws one run alone.

Writes ``loss.png``, ``lr.png`` and ``val_metrics.png`` (8 x 4.5 in at 120 dpi, 960 x 540
px) to ``--out`` (default ``WORK_DIR/curves/``) and prints their paths; a group the logs do
not have yet (no validation so far, say) is skipped with a message.
"""
from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import math
import os
import os.path as osp
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

FIGSIZE = (8, 4.5)  # inches
DPI = 120
# Bookkeeping entries of a line, not curves.
NOT_CURVES = {'step', 'iter', 'epoch', 'time', 'data_time', 'memory'}
GROUPS = ('loss', 'lr', 'val_metrics')
TITLES = {'loss': 'Training losses', 'lr': 'Learning rate',
          'val_metrics': 'Validation metrics'}


@dataclass
class Plot:
    """One picture and the data drawn in it, read back from its lines.

    Attributes:
        name (str): ``'loss'``, ``'lr'`` or ``'val_metrics'``.
        path (str): where the PNG was written.
        xlabel (str): ``'iteration'`` or ``'epoch'``.
        series (dict[str, tuple[list, list]]): legend label -> (x values, y values) of each
            line of the figure.
    """
    name: str
    path: str
    xlabel: str
    series: Dict[str, Tuple[list, list]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# Reading the logs
# ------------------------------------------------------------------------------------------
def read_scalars(path: str) -> List[dict]:
    """The records of one scalars.json, in file order.

    A last line cut short (a run killed while writing it) is left out; a damaged line
    elsewhere raises ``ValueError`` naming the file and line.

    Args:
        path (str): a ``scalars.json`` written by MMEngine's ``LocalVisBackend``.

    Returns:
        list[dict]: one dict per line.

    Example:
        >>> records = read_scalars('work_dirs/x/20240601_101500/vis_data/scalars.json')
        >>> records[0]['lr'], records[0]['iter']
    """
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise ValueError(f'{path}:{number}: not a JSON object ({error})') from None
    return records


def is_train_record(record: dict) -> bool:
    """Training lines carry the global ``iter`` (MMEngine's LogProcessor adds it to every
    training log); validation lines do not."""
    return 'iter' in record or any(is_loss(k) or is_lr(k) for k in record)


def is_loss(key: str) -> bool:
    """``loss``, ``loss_cls``, ``decode.loss_ce``, ``train/loss`` (hierarchical logging)."""
    return re.split(r'[./]', key)[-1].startswith('loss')


def is_lr(key: str) -> bool:
    """``lr``, ``base_lr``, ``backbone.lr``: MMEngine's own test is a name ending in 'lr'."""
    return key.endswith('lr')


def find_runs(work_dir: str) -> List[str]:
    """The scalars.json of each run of a work dir, oldest first.

    Run folders are named ``%Y%m%d_%H%M%S`` by MMEngine, so sorting the names sorts them in
    time; a folder without scalars.json (a test run, a run stopped before its first log) is
    not a run here.

    Args:
        work_dir (str): a training work dir.

    Returns:
        list[str]: paths of ``WORK_DIR/<timestamp>/vis_data/scalars.json``.
    """
    paths = glob.glob(osp.join(glob.escape(work_dir), '*', 'vis_data', 'scalars.json'))
    return sorted(paths, key=lambda p: osp.basename(osp.dirname(osp.dirname(p))))


def _first_train_step(records: List[dict]) -> Optional[int]:
    for record in records:
        if is_train_record(record):
            return _train_x(record)
    return None


def _train_x(record: dict) -> int:
    # `iter` is the global iteration; `step` is the same number for training lines.
    return record.get('iter', record.get('step'))


def _says_resumed(scalars_path: str) -> Optional[bool]:
    """Whether the run's dumped config (vis_data/config.py) resumed a checkpoint; None when
    there is no config to tell."""
    config = osp.join(osp.dirname(scalars_path), 'config.py')
    if not osp.isfile(config):
        return None
    with open(config) as f:
        return re.search(r'^resume\s*=\s*True\b', f.read(), re.M) is not None


def merge_resumed(paths: Sequence[str]) -> Tuple[List[dict], List[str]]:
    """The records of the newest run and of the runs it continues, in time order.

    Args:
        paths (Sequence[str]): the scalars.json of a work dir's runs, oldest first
            (:func:`find_runs`).

    Returns:
        tuple[list[dict], list[str]]: the merged records and the scalars.json they came
        from, oldest first.

    Example:
        >>> records, used = merge_resumed(find_runs('work_dirs/mask_rcnn_cvt13_coco'))
    """
    runs = [(p, read_scalars(p)) for p in paths]
    runs = [(p, r) for p, r in runs if r]
    if not runs:  # nothing logged yet
        return [], list(paths)
    chain = [runs[-1]]
    for path, records in reversed(runs[:-1]):
        later_path, later = chain[0]
        resumed = _says_resumed(later_path)
        start, earlier_start = _first_train_step(later), _first_train_step(records)
        if resumed is None:  # no config: judge by the iterations
            resumed = (start is not None and earlier_start is not None
                       and start > earlier_start)
        if not resumed or start is None:
            break
        chain.insert(0, (path, records))
    merged = []
    for i, (_, records) in enumerate(chain):
        if i + 1 < len(chain):
            # The next run restarted from a checkpoint: what this one logged from the
            # next run's first iteration on was redone (or lost with the crash).
            cut = _first_train_step(chain[i + 1][1])
            for n, record in enumerate(records):
                if is_train_record(record) and _train_x(record) >= cut:
                    records = records[:n]
                    break
        merged.extend(records)
    return merged, [path for path, _ in chain]


def load_records(source: str, run: Optional[str] = None) -> Tuple[List[dict], List[str]]:
    """The records to draw from a work dir, a run folder or a scalars.json.

    Args:
        source (str): a work dir (its newest run plus the runs that one resumed, see
            :func:`merge_resumed`), one run's ``<timestamp>`` folder, or a path to a
            ``scalars.json``.
        run (str, optional): with a work dir: draw only the run of this ``<timestamp>``
            folder. Defaults to None.

    Returns:
        tuple[list[dict], list[str]]: the records and the scalars.json files read.

    Raises:
        FileNotFoundError: no scalars.json where ``source``/``run`` point; the message
            names the paths looked at.
    """
    if osp.isfile(source):
        return read_scalars(source), [source]
    if run is not None:
        path = osp.join(source, run, 'vis_data', 'scalars.json')
        if not osp.isfile(path):
            runs = [osp.basename(osp.dirname(osp.dirname(p))) for p in find_runs(source)]
            raise FileNotFoundError(f'no run {run!r}: {path} does not exist; runs in '
                                    f'{source}: {", ".join(runs) or "none"}')
        return read_scalars(path), [path]
    single = osp.join(source, 'vis_data', 'scalars.json')  # a run folder
    if osp.isfile(single):
        return read_scalars(single), [single]
    paths = find_runs(source)
    if not paths:
        raise FileNotFoundError(
            f'no scalars.json under {source}: looked for '
            f'{osp.join(source, "<timestamp>", "vis_data", "scalars.json")} (written by '
            "MMEngine's LocalVisBackend once a training run logs its first iterations)")
    return merge_resumed(paths)


# ------------------------------------------------------------------------------------------
# From records to curves
# ------------------------------------------------------------------------------------------
def _number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # strings such as coco/bbox_mAP_copypaste, lists of per-class results
    return float(value)


def collect_curves(records: Sequence[dict], keys: Optional[Sequence[str]] = None
                   ) -> Dict[str, Dict[str, Tuple[list, list]]]:
    """Group the numeric entries of the records into curves.

    Args:
        records (Sequence[dict]): scalars.json lines (:func:`load_records`).
        keys (Sequence[str], optional): names or shell patterns (``'loss*'``,
            ``'coco/*_mAP'``) of the entries to keep. Defaults to None: all of them.

    Returns:
        dict: ``{'loss': {...}, 'lr': {...}, 'val_metrics': {...}}``, each mapping an entry
        name to its (x values, y values): x is the iteration for training entries and the
        validation line's ``step`` for metrics. COCO's -1 ("no objects of this size")
        becomes NaN, a gap rather than a drop to -1; a metric that is never defined is
        left out.

    Example:
        >>> curves = collect_curves(records, keys=['loss', 'accuracy/top1'])
        >>> xs, ys = curves['loss']['loss']
    """
    curves = {name: {} for name in GROUPS}
    for record in records:
        train = is_train_record(record)
        x = _train_x(record) if train else record.get('step')
        if x is None:
            continue
        for key, value in record.items():
            y = _number(value)
            if key in NOT_CURVES or y is None:
                continue
            if keys is not None and not any(fnmatch.fnmatchcase(key, k) for k in keys):
                continue
            if train:
                group = 'loss' if is_loss(key) else 'lr' if is_lr(key) else None
            else:
                group = 'val_metrics'
            if group is None:
                continue  # training accuracy, grad norm ...: not drawn
            if group == 'val_metrics' and y == -1 and 'mAP' in key:
                y = math.nan
            xs, ys = curves[group].setdefault(key, ([], []))
            xs.append(x)
            ys.append(y)
    for key in [k for k, (_, ys) in curves['val_metrics'].items() if all(map(math.isnan, ys))]:
        del curves['val_metrics'][key]  # never defined (no small objects in val, say)
    return curves


def _val_xlabel(records: Sequence[dict]) -> str:
    # LoggerHook logs metrics at the epoch when the LogProcessor counts epochs (its training
    # lines then carry `epoch`), at the iteration otherwise.
    return 'epoch' if any('epoch' in r for r in records if is_train_record(r)) else 'iteration'


# ------------------------------------------------------------------------------------------
# Drawing
# ------------------------------------------------------------------------------------------
def _draw(name: str, curves: Dict[str, Tuple[list, list]], xlabel: str, title: str,
          path: str) -> Plot:
    # The Agg canvas directly, not pyplot: no global backend switch and no figure kept
    # alive by pyplot's registry, whatever the caller (a test, a training script) does.
    import matplotlib
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = matplotlib.colormaps['tab10'].colors
    styles = ('-', '--', ':', '-.')
    # The total loss first, in black: the components are its parts.
    keys = sorted(curves, key=lambda k: k != 'loss') if name == 'loss' else list(curves)
    for i, key in enumerate(keys):
        xs, ys = curves[key]
        # `lr` and `base_lr` often coincide: a new dash per line keeps both visible. Past
        # ten lines (COCO's twelve mAPs) the colours repeat: the dashes tell them apart.
        style = styles[i % 4] if name == 'lr' else styles[i // 10 % 4]
        total = name == 'loss' and key == 'loss'
        # Markers where points are few (one validation, a short run): a lone point shows.
        ax.plot(xs, ys, label=key, linestyle=style, marker='o' if len(xs) <= 30 else None,
                markersize=3, linewidth=1.8 if total else 1.2,
                color='black' if total else colors[i % 10])
    ax.set_xlabel(xlabel)
    ax.set_ylabel({'loss': 'loss', 'lr': 'learning rate'}.get(name, 'value'))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if name == 'lr':
        ax.ticklabel_format(axis='y', style='sci', scilimits=(-3, 3))
    ax.xaxis.get_major_locator().set_params(integer=True)  # no iteration 2.5
    all_x = [x for xs, _ in curves.values() for x in xs]
    if max(all_x) - min(all_x) < 2:  # one validation so far: room for integer ticks
        ax.set_xlim(min(all_x) - 1, max(all_x) + 1)
    if len(curves) > 4:  # beside the axes, where it hides no line
        ax.legend(fontsize='small', loc='upper left', bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize='small')
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    series = {line.get_label(): (np.asarray(line.get_xdata()).tolist(),
                                 np.asarray(line.get_ydata()).tolist())
              for line in ax.get_lines()}
    return Plot(name, path, xlabel, series)


def plot_curves(records: Sequence[dict], out_dir: str, keys: Optional[Sequence[str]] = None,
                title: str = '') -> Tuple[List[Plot], List[str]]:
    """Draw the losses, the learning rate and the validation metrics of the records.

    Args:
        records (Sequence[dict]): scalars.json lines (:func:`load_records`).
        out_dir (str): folder for the PNGs; created when missing.
        keys (Sequence[str], optional): entries to draw, names or shell patterns (see
            :func:`collect_curves`). Defaults to None: every loss, learning rate and metric.
        title (str): prefix of the pictures' titles, e.g. the work dir's name. Defaults to
            ``''``.

    Returns:
        tuple[list[Plot], list[str]]: the pictures written (with the data of their lines)
        and the names of the groups skipped for want of data.

    Example:
        >>> records, _ = load_records('work_dirs/upernet_cvt13_ade20k')
        >>> plots, skipped = plot_curves(records, 'work_dirs/upernet_cvt13_ade20k/curves')
        >>> [p.path for p in plots]
        ['.../loss.png', '.../lr.png', '.../val_metrics.png']
    """
    curves = collect_curves(records, keys)
    xlabels = dict(loss='iteration', lr='iteration', val_metrics=_val_xlabel(records))
    plots, skipped = [], []
    for name in GROUPS:
        if not curves[name]:
            skipped.append(name)
            continue
        os.makedirs(out_dir, exist_ok=True)
        full_title = f'{title}: {TITLES[name]}' if title else TITLES[name]
        plots.append(_draw(name, curves[name], xlabels[name], full_title,
                           osp.join(out_dir, f'{name}.png')))
    return plots, skipped


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Draw the losses, learning rate and validation metrics of a training '
        'run (MMEngine scalars.json) as PNG pictures.')
    parser.add_argument('work_dir', help='work dir of a training run, one <timestamp> run '
                        'folder of it, or a path to a scalars.json')
    parser.add_argument('--out', help='folder for the PNGs (default: WORK_DIR/curves)')
    parser.add_argument('--run', help='draw only this <timestamp> run of WORK_DIR (default: '
                        'the newest run, joined to the runs it resumed)')
    parser.add_argument('--keys', nargs='+', metavar='KEY',
                        help="entries to draw, names or shell patterns such as 'loss*' "
                        "'coco/*_mAP' (default: all losses, learning rates and metrics)")
    args = parser.parse_args(argv)
    if not osp.exists(args.work_dir):
        parser.error(f'{args.work_dir} does not exist')
    if args.run is not None and not osp.isdir(args.work_dir):
        parser.error('--run needs a work dir, not a file')
    if args.run is not None and (os.sep in args.run or args.run in ('', '.', '..')):
        parser.error(f'--run takes the name of a run folder (e.g. 20240601_101500), '
                     f'got {args.run!r}')
    try:
        args.records, args.sources = load_records(args.work_dir, args.run)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    if not args.records:
        parser.error(f'{", ".join(args.sources)}: no lines logged yet')
    if args.keys:
        present = {k for group in collect_curves(args.records).values() for k in group}
        unmatched = [k for k in args.keys if not fnmatch.filter(present, k)]
        if unmatched:
            parser.error(f'--keys {" ".join(unmatched)}: not in the logs; they hold '
                         f'{", ".join(sorted(present))}')
    return args


def main(argv=None) -> List[Plot]:
    args = parse_args(argv)
    if osp.isfile(args.work_dir):
        # .../<work dir>/<timestamp>/vis_data/scalars.json, or a copy lying anywhere.
        parts = osp.abspath(args.work_dir).split(os.sep)
        work_dir = os.sep.join(parts[:-3]) if parts[-2] == 'vis_data' else osp.dirname(
            osp.abspath(args.work_dir))
    elif osp.isfile(osp.join(args.work_dir, 'vis_data', 'scalars.json')):
        work_dir = osp.dirname(osp.abspath(args.work_dir))  # a run folder
    else:
        work_dir = args.work_dir
    out_dir = args.out or osp.join(work_dir, 'curves')
    for source in args.sources:
        print(f'read {source}')
    plots, skipped = plot_curves(args.records, out_dir, args.keys,
                                 title=osp.basename(osp.abspath(work_dir)))
    for name in skipped:
        what = {'val_metrics': 'no validation metrics logged yet',
                'loss': 'no losses logged', 'lr': 'no learning rate logged'}[name]
        if args.keys:
            what += ' among --keys'
        print(f'skipped {name}.png: {what}')
    for plot in plots:
        print(plot.path)
    if not plots:
        print('nothing to draw', file=sys.stderr)
    return plots


if __name__ == '__main__':
    main()
