"""The code of a Hub folder, written out of the package's own modules: each family's Hugging
Face classes (:mod:`.huggingface`) and everything they run, as the two self-contained files
that ``trust_remote_code=True`` loads (``configuration_cvt_mm.py``, ``modeling_cvt_mm.py``;
imports: the standard library, torch, transformers). Nothing here is a second copy: the
definitions are taken from the modules' source by name, following what each one uses
(:class:`Bundle`), so the files change with the package.

What the files leave out: the package's checkpoint layouts (a Hub folder holds our layout; the
``microsoft/cvt-*`` conversion and timm's checkpoint filter raise, naming the package), and the
registrations (the folder's ``auto_map`` does that).

Example::

    >>> files = remote_code_files('cvt')
    >>> sorted(files)
    ['configuration_cvt_mm.py', 'modeling_cvt_mm.py']
"""
from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import re
from typing import Dict, Iterable, List, Optional, Set, Tuple

__all__ = ['Bundle', 'remote_code_files', 'auto_map', 'CONFIG_FILE', 'MODELING_FILE']

CONFIG_FILE = 'configuration_cvt_mm.py'
MODELING_FILE = 'modeling_cvt_mm.py'
# Definitions that belong to the installed package, replaced in a Hub folder by a function that
# says so: they read checkpoint layouts the folder does not need.
PACKAGE_ONLY = ('load_hugging_face_cvt', 'timm_checkpoint_filter', 'resample_checkpoint_bias')
# The package's modules a Hub folder's code may come from (the models need only torch).
# cvt_mm.compat: the torch feature checks the models ask (2.1 to the newest), torch only.
_ALLOWED = re.compile(r'^cvt_mm\.(?:compat|models\.(?:cvt|cmt|layers|_helpers|pos_embed_rel|'
                      r'matrix_resize|recomputation|huggingface(?:_config)?|fast(?:\.\w+)?))$')
_BUILTINS = set(dir(builtins))
Need = Tuple[str, str]  # (module name, top-level name)


class _Module:
    """One module's top-level definitions and imports, by name."""

    def __init__(self, name: str):
        module = importlib.import_module(name)
        self.name = name
        self.source = inspect.getsource(module)
        self.package = name if hasattr(module, '__path__') else name.rpartition('.')[0]
        self.defs: Dict[str, List[ast.stmt]] = {}
        # name -> (module, imported name or None for ``import module``), outside the package;
        # or the text of a try/except import block.
        self.imports: Dict[str, object] = {}
        self.module_aliases: Dict[str, str] = {}  # name -> a package module it stands for
        self.imported: Dict[str, Need] = {}  # name -> (package module, its name there)
        for node in ast.parse(self.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._add_import(node)
            elif isinstance(node, ast.Try) and all(
                    isinstance(n, (ast.Import, ast.ImportFrom))
                    for n in node.body + [s for h in node.handlers for s in h.body]):
                for stmt in node.body:  # the fallback imports bind the same names
                    self._add_import(stmt, ast.get_source_segment(self.source, node))
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.defs.setdefault(target.id, []).append(node)

    def _add_import(self, node, text: Optional[str] = None) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split('.')[0]
            if isinstance(node, ast.Import):
                self.imports[bound] = text or (alias.name, None, alias.asname)
                continue
            if not node.level:
                if node.module != '__future__':
                    self.imports[bound] = text or (node.module, alias.name, alias.asname)
                continue
            base = importlib.util.resolve_name('.' * node.level + (node.module or ''),
                                               self.package)
            submodule = f'{base}.{alias.name}'
            if not node.module and importlib.util.find_spec(submodule):  # from . import cvt
                self.module_aliases[bound] = submodule
            else:
                self.imported[bound] = (base, alias.name)


class Bundle:
    """The definitions that ``roots`` need, collected from the package's modules in an order
    that defines each before the module level uses it; names in ``provided`` come from
    ``provided_by`` (the other generated file) instead.

    Args:
        roots (Iterable[tuple[str, str]]): ``(module, name)`` pairs to define.
        provided (dict[tuple[str, str], str], optional): definitions another file holds,
            with the name they have there. Default None.
    """

    def __init__(self, roots: Iterable[Need], provided: Optional[Dict[Need, str]] = None):
        self.provided = dict(provided or {})
        self._modules: Dict[str, _Module] = {}
        self.order: List[Need] = []
        self.imports: List[object] = []
        self.from_provided: Set[str] = set()
        self._seen: Set[Need] = set()
        for root in roots:
            self._visit(root)

    def module(self, name: str) -> _Module:
        if name not in self._modules:
            if not _ALLOWED.match(name):
                raise ValueError(f'the Hub code would need {name}, which is not model code '
                                 f'(allowed: {_ALLOWED.pattern})')
            self._modules[name] = _Module(name)
        return self._modules[name]

    def _visit(self, need: Need) -> None:
        if need in self._seen:
            return
        self._seen.add(need)
        if need in self.provided:
            self.from_provided.add(self.provided[need])
            return
        mod_name, name = need
        if name in PACKAGE_ONLY:
            self.order.append(need)
            return
        mod = self.module(mod_name)
        if name not in mod.defs:
            if name in mod.imported:
                return self._visit(mod.imported[name])
            raise ValueError(f'{mod_name} does not define {name}')
        for node in mod.defs[name]:
            for dep in self._uses(mod, node):
                self._visit(dep)
        self.order.append(need)

    def _uses(self, mod: _Module, node: ast.AST) -> List[Need]:
        deps = []
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                    and sub.value.id in mod.module_aliases):
                deps.append((mod.module_aliases[sub.value.id], sub.attr))
            elif isinstance(sub, ast.Name) and sub.id not in mod.module_aliases:
                if sub.id in mod.defs:
                    deps.append((mod.name, sub.id))
                elif sub.id in mod.imported:
                    deps.append(mod.imported[sub.id])
                elif sub.id in mod.imports and mod.imports[sub.id] not in self.imports:
                    self.imports.append(mod.imports[sub.id])
        return deps

    def source(self, mod_name: str, name: str) -> str:
        if name in PACKAGE_ONLY:
            return (f'def {name}(*args, **kwargs):\n'
                    f'    raise NotImplementedError("{name} needs the cvt_mm package: the code in '
                    'a Hub folder reads that folder\'s own weights only")\n')
        mod = self.module(mod_name)
        parts = []
        for node in mod.defs[name]:
            start = min([node.lineno] + [d.lineno for d in getattr(node, 'decorator_list', [])]) - 1
            lines = mod.source.splitlines()[start:node.end_lineno]
            text = '\n'.join(lines) + '\n'
            # ``cvt.CvTModel`` -> ``CvTModel``: one namespace here.
            for alias in mod.module_aliases:
                text = re.sub(rf'(?<![\w.]){alias}\.(?=[A-Za-z_])', '', text)
            parts.append(text)
        return ''.join(parts)

    def render(self, header: str, provided_from: str = '') -> str:
        sources: Dict[str, str] = {}
        for need in self.order:  # one name, one definition (the same alias twice is one)
            text = self.source(*need)
            if sources.setdefault(need[1], text) != text:
                raise ValueError(f'the Hub code would define {need[1]} twice, differently '
                                 f'(one from {need[0]}): give them distinct names')
        out = [header.rstrip() + '\n', 'from __future__ import annotations\n']
        out += sorted(_import_lines(self.imports), key=lambda s: (not s.startswith('import'), s))
        if self.from_provided:
            out.append(f'from .{provided_from} import ' + ', '.join(sorted(self.from_provided)))
        text = '\n'.join(out) + '\n'
        return text + ''.join('\n\n' + body for body in sources.values())


def _import_lines(imports: List[object]) -> List[str]:
    """Import statements for the names used: ``from`` imports merged by module."""
    lines, names_from = set(), {}
    for imp in imports:
        if isinstance(imp, str):  # a try/except block, as written
            lines.add(imp)
            continue
        module, name, asname = imp
        if name is None:
            lines.add(f'import {module}' + (f' as {asname}' if asname else ''))
        else:
            names_from.setdefault(module, set()).add(name + (f' as {asname}' if asname else ''))
    lines.update(f'from {module} import {", ".join(sorted(names))}'
                 for module, names in names_from.items())
    return list(lines)


def auto_map(family: str) -> Dict[str, str]:
    """``config.json``'s ``auto_map`` for ``family``: each Auto class to its class in the
    folder's files."""
    from .huggingface import AUTO_CLASSES
    return {auto: f'{(CONFIG_FILE if auto == "AutoConfig" else MODELING_FILE)[:-3]}.{cls.__name__}'
            for auto, cls in AUTO_CLASSES[family].items()}


def remote_code_files(family: str) -> Dict[str, str]:
    """The two files of a Hub folder of ``family`` (``'cvt'`` or ``'cmt'``), by file name."""
    from .huggingface import AUTO_CLASSES
    classes = AUTO_CLASSES[family]
    name = {'cvt': 'CvT', 'cmt': 'CMT'}[family]
    header = (f'# Generated by cvt_mm (tools/misc/export_pretrained.py) from the package\'s own '
              f'modules: the {name}\n# models for transformers\' trust_remote_code. '
              'Edit the package, not this file.\n')
    config = classes['AutoConfig']
    config_bundle = Bundle([(config.__module__, config.__name__)])
    modeling_bundle = Bundle(
        [(cls.__module__, cls.__name__) for auto, cls in classes.items() if auto != 'AutoConfig'],
        provided={need: need[1] for need in config_bundle.order})
    return {CONFIG_FILE: config_bundle.render(header),
            MODELING_FILE: modeling_bundle.render(header, CONFIG_FILE[:-3])}
