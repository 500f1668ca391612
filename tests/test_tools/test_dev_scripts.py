"""The repository's own checks in .dev_scripts/."""
import importlib.util
import os.path as osp
import subprocess
import sys
import textwrap

from helpers import ROOT

CHECK = osp.join(ROOT, '.dev_scripts', 'check_redefinitions.py')


def _redefinitions(source):
    spec = importlib.util.spec_from_file_location('check_redefinitions', CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.redefinitions(textwrap.dedent(source))


def test_a_function_defined_twice_is_found_even_when_it_calls_itself():
    """ruff's F811 takes the recursive call for a use of the first definition."""
    assert _redefinitions('''
        def walk(cls):
            yield from walk(cls)

        LIMIT = 3

        def walk(cls):
            return []

        LIMIT = 3

        class Hook:
            def run(self):
                pass

            def run(self):
                pass
    ''') == [(7, 'walk', 2), (10, 'LIMIT', 5), (16, 'run', 13)]


def test_accessors_overloads_and_import_time_alternatives_are_not_redefinitions():
    assert _redefinitions('''
        from typing import overload

        try:
            import fast as impl
        except ImportError:
            impl = None

        if impl is None:
            def speed():
                return 1
        else:
            def speed():
                return 2

        class Stop:
            @property
            def requested(self):
                return None

            @requested.setter
            def requested(self, value):
                pass

        @overload
        def pick(x: int) -> int: ...
        def pick(x):
            return x

        __all__ = ['pick']
        __all__ += ['Stop']
    ''') == []


def test_the_repository_has_no_redefinitions():
    proc = subprocess.run([sys.executable, CHECK], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
