"""Fail on a name defined twice in one module or class body: ruff's F811 misses a function
redefined after a use (a recursive function counts as its own use), and the later
definition silently wins.

    python .dev_scripts/check_redefinitions.py [PATH ...]   # default: the repository's files

Flagged: a ``def``/``class`` or a plain assignment at the top of a module or class body
whose name an earlier ``def``/``class``/assignment at the same level already bound.
Not flagged: property setters and deleters (``@name.setter``), ``typing.overload``
stubs, definitions inside ``if``/``try`` (alternatives chosen at import time) and
augmented assignments (``__all__ += [...]``).
"""
import ast
import subprocess
import sys


def _is_alternative(node: ast.AST, name: str) -> bool:
    """A property accessor (``@name.setter``) or an ``@overload`` stub."""
    for decorator in getattr(node, 'decorator_list', ()):
        if (isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name)
                and decorator.value.id == name):
            return True
        if (isinstance(decorator, ast.Name) and decorator.id == 'overload') or (
                isinstance(decorator, ast.Attribute) and decorator.attr == 'overload'):
            return True
    return False


def _bound_names(node: ast.stmt) -> list:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [] if _is_alternative(node, node.name) else [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and node.value is not None \
            and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def redefinitions(source: str, filename: str = '<string>') -> list:
    """``(line, name, first_line)`` of every name bound twice at one level.

    Example:
        >>> redefinitions('def f():\\n    return f\\n\\ndef f():\\n    pass\\n')
        [(4, 'f', 1)]
    """
    found = []

    def visit(body):
        seen = {}
        for node in body:
            for name in _bound_names(node):
                if name in seen and name != '__all__':
                    found.append((node.lineno, name, seen[name]))
                seen.setdefault(name, node.lineno)
            if isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(ast.parse(source, filename).body)
    return found


def main(paths) -> int:
    if not paths:
        paths = subprocess.run(['git', 'ls-files', '*.py'], capture_output=True, text=True,
                               check=True).stdout.split()
    failures = 0
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for line, name, first in redefinitions(f.read(), path):
                print(f'{path}:{line}: {name!r} is defined again (first at line {first})')
                failures += 1
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
