"""``import cvt_mm`` (a config's ``custom_imports``) registers our parts and makes only the
changes without which they fail on the supported stack; :func:`cvt_mm.setup_process` makes
the rest, for our tools and for users who ask. Each check runs in a fresh interpreter."""
import json
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT

# The modules ``import cvt_mm`` loads besides its own, in the order it loads them.
THIRD_PARTY = textwrap.dedent('''
    import json, sys
    import cvt_mm  # noqa: F401
    print(json.dumps([name for name in sys.modules if name.split('.')[0] != 'cvt_mm']))
''')

# The packages that registering into the three toolboxes, timm and transformers loads without
# cvt_mm (MMPretrain's multimodal models off, as they must be beside transformers 5).
TOOLBOXES = textwrap.dedent('''
    import json, sys
    from mmpretrain.utils import dependency
    dependency.WITH_MULTIMODAL = False
    import mmdet.models, mmseg.models, mmpretrain.models  # noqa: F401
    from mmengine.runner import Runner  # noqa: F401
    import timm.models  # noqa: F401
    from transformers import AutoBackbone, AutoConfig, AutoModel, PreTrainedModel  # noqa: F401
    from transformers.backbone_utils import BackboneMixin  # noqa: F401
    print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))
''')

# Everything outside cvt_mm that a plugin could change, recorded before and after the import
# (with the modules it loads already loaded: their own import-time doings are not ours) and
# after setup_process().
SNAPSHOT = textwrap.dedent('''
    import atexit, gc, importlib, json, os, signal, sys, time, warnings
    # MMPretrain's models import only with its multimodal models off beside transformers 5,
    # which cvt_mm's import does (tests/test_integration.py): done here first, as the modules
    # cvt_mm loads are loaded before it.
    from mmpretrain.utils import dependency
    dependency.WITH_MULTIMODAL = False
    for name in json.load(open(sys.argv[1])):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - aliases such as six.moves.* are not importable
            pass
    import torch
    from mmengine.fileio.backends import registry_utils
    from mmengine.logging.history_buffer import HistoryBuffer
    from mmengine.registry import DefaultScope
    from mmengine.runner.checkpoint import CheckpointLoader
    from mmpretrain.apis import ImageClassificationInferencer
    from mmpretrain.utils import dependency

    def snapshot():
        return {
            'local storage backend': repr(registry_utils.prefix_to_backends.get('')),
            'checkpoint loaders': repr(sorted((k, repr(v))
                                              for k, v in CheckpointLoader._schemes.items())),
            'exit handlers': atexit._ncallbacks(),
            'signal handlers': repr([signal.getsignal(s) for s in signal.Signals]),
            'safe globals': repr(torch.serialization.get_safe_globals()),
            'HistoryBuffer pickling': repr(HistoryBuffer.__getstate__),
            'MMPretrain inferencer pipeline': repr(ImageClassificationInferencer._init_pipeline),
            'MMPretrain multimodal': dependency.WITH_MULTIMODAL,
            'default scope': repr(DefaultScope.get_current_instance()),
            'environment': repr(sorted(os.environ.items())),
            'torch threads': torch.get_num_threads(),
            'torch deterministic': torch.are_deterministic_algorithms_enabled(),
            'torch default dtype': repr(torch.get_default_dtype()),
            'warning filters': repr(warnings.filters),
            'sys.path': repr(sys.path),
            'objects left out of garbage collection': gc.get_freeze_count() > 0,
        }

    def changed(before, after):
        return sorted(k for k in before if before[k] != after[k])

    before = snapshot()
    import cvt_mm
    on_import = snapshot()
    cvt_mm.setup_process()
    cvt_mm.setup_process()  # idempotent
    set_up = snapshot()
    print(json.dumps(dict(import_changes=changed(before, on_import),
                          setup_changes=changed(on_import, set_up))))
''')


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, '-c', script, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_changes_only_what_the_registered_parts_need_and_setup_process_the_rest(tmp_path):
    modules = tmp_path / 'modules.json'
    modules.write_text(_run(THIRD_PARTY).splitlines()[-1])
    out = json.loads(_run(SNAPSHOT, str(modules)).splitlines()[-1])
    # Safe loading of MMEngine's checkpoints (the test below fails without it). MMPretrain's
    # multimodal switch is set before the snapshot (see SNAPSHOT; tests/test_integration.py).
    assert out['import_changes'] == ['HistoryBuffer pickling', 'safe globals']
    assert out['setup_changes'] == ['MMPretrain inferencer pipeline', 'checkpoint loaders',
                                    'local storage backend',
                                    'objects left out of garbage collection']


def test_import_loads_nothing_the_registries_it_registers_in_do_not():
    """Registering into MMDetection's, MMSegmentation's and MMPretrain's registries, timm's and
    transformers' Auto classes loads those packages (and what they import); cvt_mm adds no
    package of its own choosing."""
    ours = {name.split('.')[0] for name in json.loads(_run(THIRD_PARTY).splitlines()[-1])}
    toolboxes = set(json.loads(_run(TOOLBOXES).splitlines()[-1]))
    assert ours - toolboxes == set()


# What `import cvt_mm` loads, whether it registered the engine's parts, and what importing
# the tools' support package adds of its modules.
LOADED = textwrap.dedent('''
    import json, sys
    import cvt_mm  # noqa: F401
    from mmengine.registry import MODEL_WRAPPERS, OPTIM_WRAPPER_CONSTRUCTORS
    found = [registry.get(name) is not None for registry, name in (
        (MODEL_WRAPPERS, 'CPUDistributedDataParallel'),
        (OPTIM_WRAPPER_CONSTRUCTORS, 'BackboneLayerDecayOptimWrapperConstructor'))]
    loaded = sorted(sys.modules)
    import cvt_mm.apis  # noqa: F401
    apis_loads = sorted(name for name in sys.modules if name.startswith('cvt_mm.apis.'))
    print(json.dumps(dict(loaded=loaded, found=found, apis_loads=apis_loads)))
''')

# What the tools load to launch a run, and what only the tools and benchmarks use.
LAUNCH_MODULES = {'cvt_mm.apis.launch', 'cvt_mm.engine.layer_decay'}
TOOL_SUPPORT = 'cvt_mm.apis'  # the package of builders, flops, deployment, visualization
TOOL_MODULES = {'benchmarks'}
MODEL_ZOOS = {'mmdet.models', 'mmseg.models', 'mmpretrain.models', 'matplotlib'}


@pytest.fixture(scope='module')
def after_import():
    """One fresh interpreter's LOADED record (an interpreter importing the stack takes ~9 s)."""
    return json.loads(_run(LOADED).splitlines()[-1])


def module_file(name: str) -> str:
    path = osp.join(ROOT, *name.split('.'))
    return osp.join(path, '__init__.py') if osp.isdir(path) else path + '.py'


def test_the_modules_named_here_exist():
    """A module renamed or removed would make the checks below pass for nothing."""
    names = LAUNCH_MODULES | TOOL_MODULES | {f'{TOOL_SUPPORT}.{name}' for name in (
        'builders', 'flops', 'deployment', 'visualization')}
    assert [name for name in sorted(names) if not osp.isfile(module_file(name))] == []


def test_import_loads_no_launch_module_and_no_toolbox_model_zoo(after_import):
    """A plugin registers: ``import cvt_mm`` loads neither what launching a run needs (the
    tools import it) nor MMDetection's, MMSegmentation's or MMPretrain's model zoos (with
    matplotlib), which an MMSegmentation user would otherwise load for MMDetection's sake; the
    types configs name are registered all the same (layer decay's class, which needs
    MMPretrain's engine and through it both zoos, is imported when a config builds it)."""
    assert set(after_import['loaded']) & (LAUNCH_MODULES | TOOL_MODULES | MODEL_ZOOS) == set()
    assert after_import['found'] == [True, True]


def test_import_loads_no_tool_support_module(after_import):
    """The tools' support (a config's whole model, FLOPs, ONNX export, drawing) is
    :mod:`cvt_mm.apis`, which ``import cvt_mm`` does not load; its package loads none of its
    modules, so a tool loads only the one it imports."""
    tool_support = [name for name in after_import['loaded']
                    if name == TOOL_SUPPORT or name.startswith(TOOL_SUPPORT + '.')]
    assert tool_support == []
    assert after_import['apis_loads'] == []


RESUME_STATE = textwrap.dedent('''
    import sys
    import torch
    if sys.argv[1] == 'with':
        import cvt_mm  # noqa: F401
    from mmengine.logging import MessageHub

    hub = MessageHub.get_instance('resume_state')
    for i in range(3):
        hub.update_scalar('train/loss', 1.0 / (i + 1))
    torch.save({'message_hub': hub.state_dict()}, sys.argv[2])
    try:
        state = torch.load(sys.argv[2])  # torch's default: the safe unpickler
    except Exception as err:  # noqa: BLE001
        print('refused:', type(err).__name__)
    else:
        print('loaded', state['message_hub']['log_scalars']['train/loss'].current())
''')


def test_mmengine_training_state_loads_safely_only_with_cvt_mm(tmp_path):
    """The one change ``--resume`` with MMDetection's own tools/train.py needs: the message
    hub of every MMEngine checkpoint holds ``HistoryBuffer``s, which torch >= 2.6 refuses."""
    without = _run(RESUME_STATE.replace('sys.argv[1]', "'without'").replace(
        'sys.argv[2]', repr(str(tmp_path / 'a.pth'))))
    assert without.startswith('refused:'), without
    with_ = _run(RESUME_STATE.replace('sys.argv[1]', "'with'").replace(
        'sys.argv[2]', repr(str(tmp_path / 'b.pth'))))
    assert with_.strip() == 'loaded 0.3333333333333333', with_


WITHOUT_OPENMMLAB = textwrap.dedent('''
    import sys
    class NoOpenMMLab:  # as where only torch, timm and transformers are installed
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in ('mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain'):
                raise ModuleNotFoundError(f"No module named '{name}'")
    sys.meta_path.insert(0, NoOpenMMLab())
    import json, torch, timm
    import cvt_mm
    from transformers import AutoModel
    from cvt_mm.models import CMT, CvTModel
    from cvt_mm.models.huggingface import CvTBackbone, CvTConfig
    logits = timm.create_model('cvt_13', num_classes=3).eval()(torch.randn(1, 3, 64, 64))
    maps = CvTBackbone(CvTConfig(out_indices=[1, 2, 3]))(torch.randn(1, 3, 64, 64)).feature_maps
    pyramid = CMT('ti').eval()(torch.randn(1, 3, 64, 64))
    print(json.dumps([tuple(logits.shape), len(maps), len(pyramid),
                      sorted({m.split('.')[0] for m in sys.modules} & {'mmengine', 'mmcv'})]))
''')


def test_the_models_need_no_openmmlab():
    """Without MMEngine, mmcv and the toolboxes, ``import cvt_mm`` registers the timm models
    and the Hugging Face backbones, and the OpenMMLab backbones still build and run (their
    ``init_cfg`` needs MMEngine only for its own initialisers). The libraries are made
    unimportable in this environment; not covered: pip installing ``.[timm]`` or ``.[hf]``
    into a fresh one (their dependencies are the pyproject's)."""
    out = json.loads(_run(WITHOUT_OPENMMLAB).splitlines()[-1])
    assert out == [[1, 3], 3, 4, []]


GARBAGE_BEFORE_SETUP = textwrap.dedent('''
    import gc, weakref
    import cvt_mm
    class Node:
        pass
    gc.disable()  # only setup_process collects from here on
    node = Node()
    node.itself = node  # a cycle: only the garbage collector frees it
    alive = weakref.ref(node)
    del node
    cvt_mm.setup_process()
    gc.enable()
    gc.collect()
    print('freed' if alive() is None else 'kept for good', gc.get_freeze_count() > 0)
''')


def test_setup_process_collects_garbage_before_it_freezes_what_is_left():
    """Frozen objects are never collected: cyclic garbage alive when setup_process freezes the
    process would stay for good."""
    assert _run(GARBAGE_BEFORE_SETUP).split() == ['freed', 'True']
