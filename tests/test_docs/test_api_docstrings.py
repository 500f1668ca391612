"""The API reference (docs/api/, built from the docstrings by ``make docs``) is complete and its
examples run: every object a page of docs/api/ documents has a docstring that names each of its
parameters, and every ``>>>`` example of the public modules runs as written and prints what it
shows (doctest, in a fresh folder where the checkout's ``configs/`` is at hand, as from the
checkout's root)."""
import doctest
import glob
import importlib
import inspect
import os
import os.path as osp
import re

import pytest

import cvt_mm  # noqa: F401  (registrations, as a user's program has them)

from helpers import ROOT

API_PAGES = sorted(glob.glob(osp.join(ROOT, 'docs', 'api', '*.md')))
# The modules whose examples run. Not cvt_mm.integration: setup_process changes the whole
# process (MMEngine's loaders, gc.freeze), which tests/test_integration.py checks in processes
# of their own.
EXAMPLE_MODULES = [
    'cvt_mm', 'cvt_mm.models', 'cvt_mm.models.cvt', 'cvt_mm.models.cmt', 'cvt_mm.models.fast',
    'cvt_mm.models.huggingface_config', 'cvt_mm.models.huggingface', 'cvt_mm.checkpoint',
    'cvt_mm.checkpoint.io', 'cvt_mm.checkpoint.hub', 'cvt_mm.checkpoint.formats',
    'cvt_mm.checkpoint.loading', 'cvt_mm.checkpoint.published', 'cvt_mm.checkpoint.convert',
    'cvt_mm.apis.builders', 'cvt_mm.apis.flops', 'cvt_mm.apis.visualization',
]


def documented_objects():
    """``(directive, dotted name)`` of every autodoc directive of the API pages."""
    for page in API_PAGES:
        for directive, name in re.findall(r'^\.\. (auto\w+):: (\S+)', open(page).read(), re.M):
            yield directive, name


def resolve(name: str):
    """The object called ``name`` (``cvt_mm.models.CvT``, ``cvt_mm.checkpoint.PUBLISHED``)."""
    parts = name.split('.')
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def own_parameters(obj) -> list:
    """The parameters ``obj`` defines: a function's or a class's ``__init__``'s, less
    ``self`` and ``*args``/``**kwargs``; for a dataclass config (transformers' configs), the
    fields the class itself declares, not those of the library's base class."""
    if inspect.isclass(obj) and hasattr(obj, '__dataclass_fields__'):
        return [n for n in vars(obj).get('__annotations__', {}) if not n.startswith('_')]
    try:
        params = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters
    except (TypeError, ValueError):
        return []
    return [p.name for p in params.values() if p.name not in ('self', 'cls') and
            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def documents(doc: str, param: str) -> bool:
    """Whether a docstring documents a parameter: an ``Args:`` entry (``param (type): ...``,
    or one of a group ``a, b, param: ...``), or the name in double backticks in a sentence
    that documents several (``as :class:`CMTModel`; so are ``num_classes``, ...``)."""
    entry = rf'^\s+(\w+, )*{param}(, \w+)*( \([^)]*\))?:'
    return bool(re.search(entry, doc, re.M) or f'``{param}``' in doc)


def test_documents_tells_an_entry_from_a_mention():
    doc = """Args:
        arch (str | dict): the variant; so are ``num_classes`` and ``drop_rate``.
        out_indices, out_type, frozen_stages: OpenMMLab's.
    The name of a file.
    """
    assert all(documents(doc, p) for p in ('arch', 'num_classes', 'out_type', 'frozen_stages'))
    assert not documents(doc, 'name') and not documents(doc, 'file')


def test_every_documented_object_exists_and_names_its_parameters():
    """A parameter the docstring does not name is one the reference leaves out (the class's
    parameters may be documented on the class or its ``__init__``; ``**kwargs`` and
    ``self``-like ones need no entry)."""
    checked, undocumented = 0, []
    for directive, name in documented_objects():
        obj = resolve(name)
        if directive in ('automodule', 'autodata'):
            assert directive == 'autodata' or obj.__doc__, f'{name} has no docstring'
            continue
        doc = (obj.__doc__ or '') + (getattr(obj.__init__, '__doc__', '') or '' if
                                     inspect.isclass(obj) else '')
        assert doc.strip(), f'{name} has no docstring'
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            continue
        for param in own_parameters(obj):
            if not documents(doc, param):
                undocumented.append(f'{name}({param})')
        checked += 1
    assert undocumented == []
    assert checked >= 40


def doctests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    for module in EXAMPLE_MODULES:
        for test in finder.find(importlib.import_module(module)):
            if test.examples and test.name.startswith(module):
                yield pytest.param(test, id=test.name)


ALL_DOCTESTS = list(doctests())


def test_the_public_api_has_examples():
    names = {t.values[0].name for t in ALL_DOCTESTS}
    assert {'cvt_mm', 'cvt_mm.models', 'cvt_mm.checkpoint', 'cvt_mm.apis.builders',
            'cvt_mm.models.cvt.CvT', 'cvt_mm.models.cmt.CMT',
            'cvt_mm.checkpoint.loading.load_pretrained'} <= names
    assert len(names) >= 30


@pytest.mark.parametrize('test', ALL_DOCTESTS)
def test_docstring_example_runs_as_written(test, tmp_path, monkeypatch):
    os.symlink(osp.join(ROOT, 'configs'), tmp_path / 'configs')
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    output = []
    test.globs = dict(test.globs)
    runner.run(test, out=output.append)
    assert runner.failures == 0, ''.join(output)
