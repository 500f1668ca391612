"""The package's structure as docs/development.md draws it: imports run one way (no module
imports one that imports it back), checkpoint I/O in layers, the tools' support in cvt_mm.apis
above the plugin, no tool imports another tool, only cvt_mm.integration changes anything
outside the package, and no module outgrows its line budget."""
import ast
import glob
import os
import os.path as osp
import re

import pytest

from helpers import ROOT

PACKAGE = osp.join(ROOT, 'cvt_mm')
# Imported by any module: what is installed (_imports), what the installed torch can do
# (compat) and its weights-only unpickling rules (_weights_only). They import nothing of
# cvt_mm but each other.
FOUNDATION = {'cvt_mm._imports', 'cvt_mm.compat', 'cvt_mm._weights_only'}
# Checkpoint I/O, bottom to top: each layer may import only the layers before it.
CHECKPOINT_LAYERS = ['io', 'hub', 'published', 'formats', 'loading', 'convert']


def module_name(path: str) -> str:
    rel = osp.relpath(path, ROOT)[:-3].replace(osp.sep, '.')
    return rel[:-len('.__init__')] if rel.endswith('.__init__') else rel


MODULES = {module_name(p): p for p in glob.glob(osp.join(PACKAGE, '**', '*.py'), recursive=True)}


def imports_of(name: str) -> set:
    """The cvt_mm modules ``name`` imports, anywhere in the file (inside functions too)."""
    path = MODULES[name]
    package = name if path.endswith('__init__.py') else name.rsplit('.', 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[:len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            # `from pkg import module` imports the module when there is one.
            targets = [f'{base}.{a.name}' if f'{base}.{a.name}' in MODULES else base
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t.split('.')[0] == 'cvt_mm')
    return found - {name}


GRAPH = {name: {t for t in imports_of(name) if t in MODULES} for name in MODULES}


def test_there_is_no_import_cycle():
    """Below the package itself and integration (which `import cvt_mm` runs first and which
    may import anything), the imports form no cycle."""
    inner = {n: {t for t in ts if t not in ('cvt_mm', 'cvt_mm.integration')}
             for n, ts in GRAPH.items() if n not in ('cvt_mm', 'cvt_mm.integration')}
    state = {}

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(inner.get(node, ())):
            # A package's __init__ re-exporting its modules is not a cycle with them.
            if node == nxt.rsplit('.', 1)[0] and node.count('.') < nxt.count('.'):
                continue
            if state.get(nxt) == 'open':
                pytest.fail('import cycle: ' + ' -> '.join(path + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 'done'

    for node in sorted(inner):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize('layer', CHECKPOINT_LAYERS)
def test_checkpoint_io_is_layered(layer):
    name = f'cvt_mm.checkpoint.{layer}'
    below = {f'cvt_mm.checkpoint.{x}' for x in CHECKPOINT_LAYERS[:CHECKPOINT_LAYERS.index(layer)]}
    assert GRAPH[name] - FOUNDATION <= below, f'{name} imports {sorted(GRAPH[name] - below)}'


def test_lower_layers_do_not_import_higher_ones():
    for name, targets in GRAPH.items():
        if name in FOUNDATION:
            assert not targets - FOUNDATION, name
        if name.startswith('cvt_mm.checkpoint'):
            assert not {t for t in targets - FOUNDATION
                        if not t.startswith('cvt_mm.checkpoint')}, name
        if name.startswith('cvt_mm.models'):
            allowed = ('cvt_mm.models', 'cvt_mm.checkpoint', *FOUNDATION)
            assert all(t.startswith(allowed) for t in targets), (name, targets)


def is_tool_support(name: str) -> bool:
    return name == 'cvt_mm.apis' or name.startswith('cvt_mm.apis.')


def test_the_tool_support_sits_above_the_plugin_and_nothing_in_it_imports_it():
    """cvt_mm.apis (the tools' launch layer, builders, FLOPs, ONNX export, drawing) uses the
    models, checkpoint I/O and the engine; the plugin (the package, integration, models,
    checkpoint, engine) never imports it, so ``import cvt_mm`` cannot load it
    (tests/test_import_cvt_mm.py)."""
    tool_support = {name for name in MODULES if is_tool_support(name)}
    assert {'cvt_mm.apis.builders', 'cvt_mm.apis.flops', 'cvt_mm.apis.deployment',
            'cvt_mm.apis.visualization'} <= tool_support
    for name in sorted(set(MODULES) - tool_support):
        assert not {t for t in GRAPH[name] if is_tool_support(t)}, (name, GRAPH[name])
    allowed = ('cvt_mm.apis', 'cvt_mm.models', 'cvt_mm.checkpoint', 'cvt_mm.engine',
               *FOUNDATION)
    for name in sorted(tool_support):
        assert all(t.startswith(allowed) for t in GRAPH[name]), (name, GRAPH[name])


def test_the_package_root_holds_the_plugin_core_only():
    """Loose modules at the root are the plugin's core (and ``process``, the module a config's
    ``custom_imports`` names to set its process up); everything else has its room."""
    root_modules = {osp.basename(p)[:-3] for p in glob.glob(osp.join(PACKAGE, '*.py'))}
    assert root_modules == {'__init__', '_imports', '_weights_only', 'compat', 'integration',
                            'process'}


# Lines per module, as the team decided: the two backbone files hold a whole family each
# (blocks, model, backbone, arch table, checkpoint layouts, registrations), so they may be
# longer; any other module past the budget holds more than one concern.
LINE_BUDGET = 450
BACKBONE_LINE_BUDGET = 800
BACKBONE_FILES = ('cvt_mm/models/cvt.py', 'cvt_mm/models/cmt.py')
# The training engine as a whole (docs/development.md, "Where the lines go").
ENGINE_LINE_BUDGET = 1800


def test_every_module_keeps_its_line_budget():
    over = {}
    for path in sorted(MODULES.values()):
        rel = osp.relpath(path, ROOT).replace(osp.sep, '/')
        budget = BACKBONE_LINE_BUDGET if rel in BACKBONE_FILES else LINE_BUDGET
        with open(path) as f:
            lines = sum(1 for _ in f)
        if lines > budget:
            over[rel] = f'{lines} lines > {budget}'
    assert over == {}


def test_the_engine_keeps_its_line_budget():
    """`find cvt_mm/engine -name '*.py' | xargs wc -l`, as development.md counts it."""
    total = 0
    for path in glob.glob(osp.join(PACKAGE, 'engine', '**', '*.py'), recursive=True):
        with open(path) as f:
            total += sum(1 for _ in f)
    assert total <= ENGINE_LINE_BUDGET, f'cvt_mm/engine: {total} lines > {ENGINE_LINE_BUDGET}'
    assert all(osp.isfile(osp.join(ROOT, rel)) for rel in BACKBONE_FILES)


def test_only_integration_changes_mmengine_mmpretrain_and_torch():
    """MMEngine's registries are added to anywhere (that is what registering is); changing
    MMEngine, MMPretrain or torch happens in cvt_mm/integration.py alone (when it happens is
    tests/test_import_cvt_mm.py's business). The interpreter's exit handler for guarded data
    workers is registered where they are configured, in cvt_mm/engine/workers.py."""
    changes = re.compile(r'register_backend\(|register_scheme\(|add_safe_globals\(|'
                         r'WITH_MULTIMODAL\s*=|__getstate__\s*=|_init_pipeline\s*=')
    offenders = [name for name, path in MODULES.items() if name != 'cvt_mm.integration'
                 and changes.search(open(path).read())]
    assert offenders == []
    exit_handlers = [name for name, path in MODULES.items()
                     if 'atexit.register(' in open(path).read()]
    assert exit_handlers == ['cvt_mm.engine.workers']


def test_the_engine_keeps_one_hook_per_module_and_its_other_modules_below_the_hooks():
    """Hooks use the engine's modules, never the other way round (the tools' layer on top of
    the engine, cvt_mm.apis.launch, catches the preemption hook's exception); each hook
    module holds one registered hook, named after it (as MMEngine's mmengine/hooks).
    ``ExactResumeHook`` lives with the states it saves and restores, in ``exact_resume``."""
    engine = {name for name in MODULES if name.startswith('cvt_mm.engine.')}
    hooks = {name for name in engine if name.startswith('cvt_mm.engine.hooks')}
    for name in sorted(engine - hooks):
        assert not GRAPH[name] & hooks, f'{name} imports {sorted(GRAPH[name] & hooks)}'
    for name in sorted(hooks - {'cvt_mm.engine.hooks'}):
        tree = ast.parse(open(MODULES[name]).read())
        registered = [node.name for node in tree.body if isinstance(node, ast.ClassDef)
                      and any('register_module' in ast.unparse(d) for d in node.decorator_list)]
        snake = re.sub(r'(?<!^)(?=[A-Z])', '_', registered[0]).lower() if registered else ''
        assert len(registered) == 1 and name.endswith('.' + snake), (name, registered)


def test_no_tool_imports_another_tool():
    # MMDeploy's deploy configs are configs (read by MMDeploy's Config), not importable tools:
    # their names (`_base_/onnxruntime.py`, as MMDeploy's own) are no module of ours.
    tools = [p for p in glob.glob(osp.join(ROOT, 'tools', '**', '*.py'), recursive=True)
             if f'{os.sep}mmdeploy_configs{os.sep}' not in p]
    names = {osp.splitext(osp.basename(p))[0] for p in tools}
    for path in tools:
        text = open(path).read()
        # check_stack.py loads tools/misc/stacks.py and cvt_mm/apis/stacks.py (standard library
        # only) by their paths: the set-up runs it before anything, torch included, is installed.
        if not path.endswith(osp.join('misc', 'check_stack.py')):
            assert 'spec_from_file_location' not in text, path
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported.update(a.name.split('.')[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported.add((node.module or '').split('.')[0])
        assert not imported & names, (path, imported & names)


# Inside cvt_mm.models, each level imports only the levels below it (docs/development.md).
# The fast paths sit right below the blocks that choose them, so the reference path (every
# level under them) imports nothing from cvt_mm.models.fast.
MODEL_LEVELS = [
    {'layers', '_helpers'},
    {'matrix_resize', 'recomputation'},
    {'backbone', '_registry', 'pos_embed_rel'},
    {'fast', 'fast.attention', 'fast.quick_gelu', 'fast.relative_position_bias'},
    {'cvt', 'cmt'},
    {'huggingface_config'},
    {'huggingface'},
    {'remote_code'},
    {'export'},
]
FAST_LEVEL = next(i for i, level in enumerate(MODEL_LEVELS) if 'fast' in level)


def test_the_models_import_one_way():
    level_of = {f'cvt_mm.models.{m}': i for i, level in enumerate(MODEL_LEVELS) for m in level}
    assert set(level_of) | {'cvt_mm.models'} == {n for n in MODULES
                                                 if n.startswith('cvt_mm.models')}
    for name, level in level_of.items():
        # Strictly lower levels; the fast package's modules may use one another.
        not_below = {t for t in GRAPH[name] if t in level_of and level_of[t] >= level
                     and not (level_of[t] == level == FAST_LEVEL)}
        assert not not_below, f'{name} imports {sorted(not_below)}'
