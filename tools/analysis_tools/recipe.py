"""What a config trains with, read from the optimizer, schedulers and loop MMEngine builds
(:mod:`cvt_mm.apis.recipe`): batch, LR and weight decay, which parameters have no weight decay,
the backbone's LR, schedule, images seen, drop path, EMA, BatchNorm policy and augmentation.

    python tools/analysis_tools/recipe.py configs/mask2former_cvt13_coco.py
    python tools/analysis_tools/recipe.py --check docs/recipes.md   # every config against it
    python tools/analysis_tools/recipe.py --write docs/recipes.md   # rewrite its table

``--check`` exits 1 and names each config, column and both values where the table and the
configs differ (and each row without a source); ``--write`` keeps the sources.
"""
import argparse
import glob
import os.path as osp
import sys
from typing import Dict, List, Optional

from cvt_mm.apis.recipe import COLUMNS, describe_recipe

# docs/recipes.md's table: one row per config of the repository, the cells describe_recipe
# fills and the row's source.
HEADER = ('config', ) + COLUMNS + ('source', )


def _cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip('|').split('|')]


def read_table(path: str) -> Dict[str, Dict[str, str]]:
    """The rows of the recipe table in the markdown file ``path``, by config file (its first
    cell, a config path in backticks): ``{config: {column: cell}}`` over :data:`HEADER`."""
    rows, columns = {}, None
    with open(path, encoding='utf-8') as f:
        for line in f:
            if not line.startswith('|'):
                columns = None
                continue
            cells = _cells(line)
            if columns is None:
                columns = cells
                if tuple(columns) != HEADER:
                    raise ValueError(f'{path}: a table with columns {columns}; the recipe '
                                     f'table has {list(HEADER)}')
            elif not set(line) <= set('|-: \n'):
                rows[cells[0].strip('`')] = dict(zip(columns, cells))
    return rows


def check_table(path: str, configs: Optional[List[str]] = None) -> List[str]:
    """What differs between the table in ``path`` and the configs (every ``configs/*.py`` of
    the repository by default): a config without a row, a row without a config or a source,
    and each cell that is not what :func:`describe_recipe` gives. Empty when they agree."""
    configs = configs if configs is not None else _repo_configs()
    rows = read_table(path)
    problems = [f'{row}: in the table, but no such config' for row in rows
                if row not in configs]
    for config in configs:
        row = rows.get(config)
        if row is None:
            problems.append(f'{config}: no row in {path}')
            continue
        if not row.get('source'):
            problems.append(f'{config}: the row names no source')
        actual = describe_recipe(config)
        problems += [f'{config}: {col}: the table says {row.get(col)!r}, the config gives '
                     f'{actual[col]!r}' for col in COLUMNS if row.get(col) != actual[col]]
    return problems


def write_table(path: str, configs: Optional[List[str]] = None) -> None:
    """Rewrite the table in ``path`` from the configs, keeping each row's source (a new
    config's row gets an empty source, which :func:`check_table` reports)."""
    configs = configs if configs is not None else _repo_configs()
    old = read_table(path)
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    start = next(i for i, line in enumerate(lines) if line.startswith('|'))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith('|')),
               len(lines))
    table = ['| ' + ' | '.join(HEADER) + ' |', '|' + '---|' * len(HEADER)]
    for config in configs:
        cells = describe_recipe(config)
        source = old.get(config, {}).get('source', '')
        table.append('| ' + ' | '.join([f'`{config}`'] + [cells[c] for c in COLUMNS]
                                       + [source]) + ' |')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines[:start] + table + lines[end:]))


def _repo_configs() -> List[str]:
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))  # tools/analysis_tools/
    return sorted(osp.relpath(p, root) for p in glob.glob(osp.join(root, 'configs', '*.py')))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='the recipe a config trains with')
    parser.add_argument('configs', nargs='*', help='config files')
    group = parser.add_mutually_exclusive_group()
    group.add_argument('--check', metavar='MARKDOWN',
                       help='compare the recipe table in this file with the configs')
    group.add_argument('--write', metavar='MARKDOWN',
                       help='rewrite the recipe table in this file from the configs')
    args = parser.parse_args(argv)
    configs = args.configs or None
    if args.check:
        problems = check_table(args.check, configs)
        for problem in problems:
            print(problem)
        print(f'{args.check}: ' + (f'{len(problems)} difference(s)' if problems
                                   else 'every row matches its config'))
        return 1 if problems else 0
    if args.write:
        write_table(args.write, configs)
        return 0
    if not configs:
        parser.error('name configs, or --check / --write a table')
    for config in configs:
        row = describe_recipe(config)
        print(config)
        for column in COLUMNS:
            print(f'  {column}: {row[column]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
