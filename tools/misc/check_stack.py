"""Check a stack's requirements before anything is built, and tell the set-up where it goes.

    python tools/misc/check_stack.py fork                 # the problems, or "ok"
    python tools/misc/check_stack.py fork --shell         # VENV=... for tools/misc/setup_env.sh
    python tools/misc/check_stack.py --requirements my.txt --python 3.12

Exits 2 naming what cannot work together and what is allowed (cvt_mm.apis.stacks.problems). Runs on
the standard library alone: the tested stacks (tools/misc/stacks.py) and the rules
(cvt_mm/apis/stacks.py) are loaded by their paths, since nothing (not even torch) is installed
yet when the set-up calls it.
"""
import argparse
import importlib.util
import os.path as osp
import shlex
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _load(name: str, *path: str):
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, *path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple needs its module while the class is made
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    stacks = _load('cvt_mm_tested_stacks', 'tools', 'misc', 'stacks.py')
    rules = _load('cvt_mm_stack_rules', 'cvt_mm', 'apis', 'stacks.py')
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('stack', nargs='?', choices=sorted(stacks.STACKS))
    parser.add_argument('--requirements', help='check this file instead of the stack\'s')
    parser.add_argument('--python', help='the target Python (default: the stack\'s, or 3.11)')
    parser.add_argument('--shell', action='store_true',
                        help='print the stack as shell assignments (VENV, PYTHON_VERSION, '
                             'REQUIREMENTS, EXTRAS, IMPORTS)')
    args = parser.parse_args(argv)
    if not args.stack and not args.requirements:
        parser.error('name a stack (prebuilt, pinned, fork) or --requirements FILE')
    if args.shell and not args.stack:
        parser.error('--shell prints a stack\'s settings: name the stack (prebuilt, pinned, fork)')
    stack = stacks.STACKS.get(args.stack)
    path = args.requirements or osp.join(ROOT, stack.requirements)
    python = args.python or (stack.python if stack else '3.11')
    with open(path) as f:
        pins = rules.parse_requirements(f)
    found = rules.problems(pins, tuple(int(p) for p in python.split('.')))
    if found:
        print(f'check_stack: {path} (Python {python}) cannot work:', file=sys.stderr)
        for problem in found:
            print(f'  - {problem}', file=sys.stderr)
        return 2
    if args.shell:
        values = dict(VENV=stack.venv, PYTHON_VERSION=stack.python,
                      REQUIREMENTS=stack.requirements, EXTRAS=','.join(stack.extras),
                      IMPORTS=','.join(stack.imports))
        print('\n'.join(f'{k}={shlex.quote(v)}' for k, v in values.items()))
    else:
        print(f'check_stack: {path} (Python {python}): ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
