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
import sys

from cvt_mm.apis.recipe import COLUMNS, check_table, describe_recipe, write_table


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
