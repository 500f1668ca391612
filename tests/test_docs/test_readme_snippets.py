"""The python snippets of the README, docs/ and the CHANGELOG work as written: each block that
starts with `_base_ =` is written to a file and its model built; each `model = dict(...)` or
`backbone = dict(...)` fragment is built and run on a small input (weights from random, so no
download is needed). A checkpoint a snippet names is a published one (the download tool knows
it), every relative link leads to a file that exists and every `#anchor` to a heading of it, and
every page is in the docs site's table of contents (the site's own build, `make docs`, checks
the same with Sphinx; these checks are its cheap part, run with the suite)."""
import glob
import os.path as osp
import re
import shlex

import pytest

import cvt_mm  # noqa: F401
from cvt_mm.checkpoint import PUBLISHED

from helpers import ROOT, build_model_from_config, repo_config

DOCS = [osp.join(ROOT, 'README.md')] + sorted(glob.glob(osp.join(ROOT, 'docs', '*.md'))) + \
    sorted(glob.glob(osp.join(ROOT, 'docs', 'api', '*.md'))) + \
    sorted(glob.glob(osp.join(ROOT, 'configs', '*', 'README.md'))) + \
    [osp.join(ROOT, 'CHANGELOG.md')]
PUBLISHED_FILES = {osp.basename(p.filename) for p in PUBLISHED}


def config_snippets():
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for i, block in enumerate(re.findall(r'```python\n(.*?)```', text, re.S)):
            if block.lstrip().startswith('_base_ ='):
                yield pytest.param(block, id=f'{osp.basename(path)}#{i}')


@pytest.mark.parametrize('snippet', list(config_snippets()))
def test_config_snippet_builds(snippet, tmp_path):
    # Paths in snippets are relative to the repository root, where users run the tools.
    # One base or a list of them (a model config and a fragment such as tensorboard.py).
    text = re.sub(r"_base_ = (\[[^\]]*\]|'[^']+')", lambda m: '_base_ = ' + re.sub(
        r"'([^':]+)'", lambda p: repr(osp.join(ROOT, p.group(1))), m.group(1)), snippet)
    path = tmp_path / 'snippet.py'
    path.write_text(text)
    cfg = repo_config(str(path))
    init_cfg = cfg.model.backbone.get('init_cfg')
    if init_cfg:
        assert osp.basename(init_cfg['checkpoint']) in PUBLISHED_FILES
    build_model_from_config(cfg)


def fragment_snippets():
    """```python blocks that define a `model` or a `backbone` dict for users to paste."""
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for i, block in enumerate(re.findall(r'```python\n(.*?)```', text, re.S)):
            if re.match(r'(model|backbone) = dict\(', block.lstrip()):
                yield pytest.param(block, id=f'{osp.basename(path)}#{i}')


@pytest.mark.parametrize('snippet', list(fragment_snippets()))
def test_model_and_backbone_snippets_build_and_run(snippet):
    import torch
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    names = {}
    exec(snippet, {}, names)
    if 'backbone' in names:
        cfg = dict(names['backbone'])
        checkpoint = cfg.pop('init_cfg')['checkpoint']
        assert osp.basename(checkpoint) in PUBLISHED_FILES
        model = MODELS.build(cfg)
        outs = model.eval()(torch.randn(1, 3, 64, 96))
        assert len(outs) == len(model.out_indices)
    else:
        init_default_scope('mmpretrain')
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            model = MODELS.build(names['model'])
        logits = model.eval()(torch.randn(2, 3, 64, 64), mode='tensor')
        assert logits.shape == (2, 1000)


def test_there_are_snippets_to_check():
    assert list(config_snippets()) and len(list(fragment_snippets())) >= 4


# ----------------------------------------------------------------------------- commands
def command_lines():
    """Every command of the ```bash blocks (continuation lines joined, comments dropped) and
    every inline `python ...` / `bash ...` command of the prose."""
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for block in re.findall(r'```bash\n(.*?)```', text, re.S):
            for line in block.replace('\\\n', ' ').splitlines():
                line = line.split(' #')[0].strip()
                if line and not line.startswith('#'):
                    yield osp.basename(path), line
        for line in re.findall(r'(?<!`)`((?:python|bash) [^`]+)`', text):
            yield osp.basename(path), line


def _tool_args(words):
    """(tool, args) of a `python tools/X.py ...` or `bash tools/X.sh ...` command (or of a
    maintainer's script in .dev_scripts/); tools/misc/cpu_malloc.sh runs the command after
    it, which is the tool."""
    for i, word in enumerate(words):
        if word.startswith(('tools/', '.dev_scripts/')) and word != 'tools/misc/cpu_malloc.sh':
            return word, words[i + 1:]
    return None, None


class _Parsed(Exception):
    """Raised by the patched ``ArgumentParser.parse_args`` once a tool's arguments parsed."""


def _placeholders_filled(args):
    """A command's words with the docs' placeholders (``CONFIG``, ``OUT_DIR``, ``[...]``)
    left out of optional groups: ``[--arch NAME]`` is documentation, not a flag given."""
    return [a for a in args if not (a.startswith('[') or a.endswith(']') or a == '...')]


def test_every_tool_command_parses_and_names_real_files(monkeypatch):
    """Commands need GPUs, datasets or downloads to run, so each is checked as far as that
    is possible here: the script exists, the configs it names load, its flags parse through
    the tool's own parser (every python tool: its ``parse_args``/``main`` runs until argparse
    returns; the shell launchers: the flags they pass on to train.py/test.py), and a make
    target exists."""
    import argparse

    from helpers import load_script
    monkeypatch.setenv('LOCAL_RANK', '0')  # what the tools' parse_args would set
    checked, makefile = 0, open(osp.join(ROOT, 'Makefile')).read()
    loaded, modules, parsed_tools = set(), {}, set()
    original_parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original_parse(self, args, namespace)  # SystemExit(2) and argparse's message if not
        raise _Parsed

    def parse(path, args):
        if path not in modules:
            modules[path] = load_script(osp.join(ROOT, path))
        module = modules[path]
        entry = getattr(module, 'parse_args', None) or module.main
        monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', parse_then_stop)
        try:
            with pytest.raises(_Parsed):
                entry(args)
        finally:
            monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', original_parse)
        parsed_tools.add(path)

    for doc, line in command_lines():
        words = [w for w in line.split() if '=' not in w or w.startswith('-')]
        if words and words[0] == 'make':
            for target in (w for w in words[1:] if not w.startswith('-')):
                assert re.search(rf'^{re.escape(target)}:', makefile, re.M), (doc, line)
            checked += 1
            continue
        tool, args = _tool_args(shlex.split(line))  # quoted --model "dict(...)" is one word
        if tool is None:
            continue
        assert osp.isfile(osp.join(ROOT, tool)), (doc, line)
        args = _placeholders_filled(args)
        for arg in args:
            if arg.startswith('configs/') and arg not in loaded:
                repo_config(osp.join(ROOT, arg))
                loaded.add(arg)
        name = osp.basename(tool)
        try:
            if name == 'dist_train.sh':  # CONFIG GPUS [train.py options]
                parse('tools/train.py', args[:1] + args[2:] + ['--launcher', 'pytorch'])
            elif name == 'dist_test.sh':  # CONFIG CHECKPOINT GPUS [test.py options]
                parse('tools/test.py', args[:2] + args[3:] + ['--launcher', 'pytorch'])
            elif name == 'slurm_train.sh':  # PARTITION JOB CONFIG WORK_DIR [options]
                parse('tools/train.py', [args[2], '--work-dir', args[3], *args[4:]])
            elif name == 'slurm_sbatch.sh':  # CONFIG WORK_DIR [options]
                parse('tools/train.py', [args[0], '--work-dir', args[1], *args[2:]])
            elif tool.endswith('.py'):
                parse(tool, args)
        except BaseException as err:  # noqa: BLE001 - argparse exits; say which command
            if isinstance(err, (KeyboardInterrupt, pytest.fail.Exception)):
                raise
            raise AssertionError(f'{doc}: {line!r} does not parse: {err!r}') from err
        checked += 1
    assert checked >= 20
    # The train and test commands, and at least the analysis, deployment, conversion and
    # demo tools, parsed through their own parsers.
    assert len(parsed_tools) >= 10, sorted(parsed_tools)


# ----------------------------------------------------------------------------- links
def heading_anchors(text: str) -> set:
    """The anchors GitHub (and MyST's ``myst_heading_anchors``) give a page's headings:
    lower case, punctuation dropped, spaces made hyphens, ``-1``, ``-2`` on repeats. Lines in
    fenced code blocks are not headings."""
    anchors, seen = set(), {}
    for line in re.sub(r'^```.*?^```', '', text, flags=re.S | re.M).splitlines():
        match = re.match(r'#{1,6} (.+)', line)
        if match:
            slug = re.sub(r'[^\w\- ]', '', match.group(1).strip().lower()).replace(' ', '-')
            anchors.add(slug if slug not in seen else f'{slug}-{seen[slug]}')
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_heading_anchors_are_github_s():
    text = ("# CPU benchmarks: work, speed, memory\n## The test suite's time\n"
            "## `torch.compile`\n```bash\n# not a heading\n```\n## Rerun\n## Rerun\n")
    assert heading_anchors(text) == {'cpu-benchmarks-work-speed-memory', 'the-test-suites-time',
                                     'torchcompile', 'rerun', 'rerun-1'}


def test_every_relative_link_resolves():
    """[text](path), [text](path#anchor) and [text](#anchor) in the README, docs/, the
    model-zoo pages and the CHANGELOG name files that exist and headings they have (web links
    are not fetched: there is no internet here)."""
    checked = anchors = 0
    for path in DOCS:
        text = open(path).read()
        for target in re.findall(r'\]\(([^)\s]+)\)', text):
            if re.match(r'[a-z]+://|mailto:', target):
                continue
            name, _, anchor = target.partition('#')
            file = osp.normpath(osp.join(osp.dirname(path), name)) if name else path
            where = f'{osp.relpath(path, ROOT)} links to'
            assert osp.exists(file), f'{where} missing {target}'
            if anchor:
                assert file.endswith('.md'), f'{where} an anchor of a file, not a page: {target}'
                assert anchor in heading_anchors(open(file).read()), \
                    f'{where} {target}, a heading {osp.relpath(file, ROOT)} does not have'
                anchors += 1
            checked += 1
    assert checked >= 20 and anchors >= 10


def toctree_entries(path: str) -> set:
    """The pages a page's ```{toctree} blocks list, as paths."""
    entries = set()
    for block in re.findall(r'```\{toctree\}\n(.*?)```', open(path).read(), re.S):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(':'):
                name = re.sub(r'^.*<(.+)>$', r'\1', line)  # "Title <page>"
                entries.add(osp.normpath(osp.join(osp.dirname(path), name + '.md')))
    return entries


def test_every_page_is_in_the_sites_table_of_contents():
    """docs/index.md's toctrees (and those of the pages they list) reach every page of DOCS,
    and list only pages that exist: the site has no orphan page and no dead entry."""
    reached, todo = set(), [osp.join(ROOT, 'docs', 'index.md')]
    while todo:
        page = todo.pop()
        reached.add(page)
        for entry in toctree_entries(page):
            assert osp.isfile(entry), f'{osp.relpath(page, ROOT)} lists missing {entry}'
            if entry not in reached:
                todo.append(entry)
    assert set(DOCS) - reached == set()


def test_every_test_the_docs_name_exists():
    """A test a page cites for a claim (`` `test_name` ``, `` `test_name[case]` ``, or a
    shortened `` `test_prefix_...[case]` ``) is a test function of the suite, and a named case
    one of its parameters, so renaming or dropping a test cannot leave the claim unbacked."""
    defined = {}
    for path in glob.glob(osp.join(ROOT, 'tests', '**', 'test_*.py'), recursive=True):
        for name in re.findall(r'^def (test_\w+)\(', open(path).read(), re.M):
            defined[name] = open(path).read()
    checked = 0
    for path in DOCS:
        cited = re.findall(r'`(test_\w+(?:\.\.\.)?)(?:\[([^\]]+)\])?`', open(path).read())
        for name, case in cited:
            matches = [d for d in defined if d == name or
                       (name.endswith('...') and d.startswith(name[:-3]))]
            assert len(matches) == 1, f'{osp.relpath(path, ROOT)} names test {name!r}: ' \
                                      f'{"no" if not matches else len(matches)} tests match'
            assert not case or repr(case) in defined[matches[0]], \
                f'{osp.relpath(path, ROOT)} names case {case!r} of {matches[0]}, not one of its ' \
                'parameters'
            checked += 1
    assert checked >= 5


def test_readme_is_a_front_page():
    """The README stays a front page: reference material belongs in docs/."""
    assert len(open(DOCS[0]).read().splitlines()) <= 200
