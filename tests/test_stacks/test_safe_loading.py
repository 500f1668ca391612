"""Safe loading runs no code from the file, on every stack (``make stack-check``): each hostile
file below is refused by :func:`cvt_mm.compat.safe_load` (torch's own weights-only unpickler
with our allow-list on torch >= 2.5, ``cvt_mm._weights_only`` before), its code does not run
and nothing in the process changes; a legitimately saved MMEngine checkpoint still loads
(here a synthetic one; test_stack_check.py reads a real training run's).
"""
import argparse
import collections
import os
import pickle
import types
from typing import Tuple

import numpy as np
import pytest
import torch

import cvt_mm  # noqa: F401  (allow-lists MMEngine's checkpoint types)
from cvt_mm import compat

pytestmark = pytest.mark.stack


def _raw_pickle_module(raw: bytes) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.save`` that writes ``raw`` as the file's pickle, so that
    the file is a real torch zip file whose pickle is exactly the opcodes under test."""
    class Pickler:
        def __init__(self, f, protocol=None):
            self.f = f

        def dump(self, obj):
            self.f.write(raw)

    module = types.ModuleType('raw_pickle')
    module.Pickler = Pickler
    return module


def _save_raw(path, raw: bytes) -> str:
    torch.save(None, path, pickle_module=_raw_pickle_module(raw))
    return str(path)


class _Scripted(torch.nn.Module):
    """TorchScript runs ``__setstate__`` when ``torch.jit.load`` reads the archive."""

    def __init__(self):
        super().__init__()
        self.x = torch.zeros(1)

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.x, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:
        print('SCRIPTED CODE RAN')
        self.x = state[0]
        self.training = state[1]

    def forward(self, x):
        return x


def test_a_torchscript_archive_is_refused_before_its_code_runs(tmp_path, capfd):
    path = str(tmp_path / 'scripted.pt')
    torch.jit.save(torch.jit.script(_Scripted()), path)
    torch.jit.load(path)  # the premise: loading it runs its code
    assert 'SCRIPTED CODE RAN' in capfd.readouterr().out
    for source in (path, open(path, 'rb')):  # a path and an open file
        with pytest.raises(compat.UnsafeCheckpointError,
                           match=r'TorchScript archive .*torch\.jit\.load\(path\)'):
            compat.safe_load(source)
    assert 'SCRIPTED CODE RAN' not in capfd.readouterr().out


def test_a_file_that_builds_state_onto_an_allowed_class_is_refused(tmp_path):
    # PROTO 2, GLOBAL collections.Counter (allowed), BUILD (None, {'hijacked': 1}): with only
    # the globals restricted, this sets Counter.hijacked for the whole process.
    raw = b'\x80\x02ccollections\nCounter\nN}X\x08\x00\x00\x00hijackedK\x01s\x86b.'
    path = _save_raw(tmp_path / 'build.pt', raw)
    with pytest.raises(pickle.UnpicklingError, match='(?i)build'):
        compat.safe_load(path)
    assert not hasattr(collections.Counter, 'hijacked')


class _Reduce:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


@pytest.mark.parametrize('func, args', [
    (os.system, ('echo CODE RAN',)),
    (eval, ('print("CODE RAN")',)),
    (torch.hub.load, ('evil/repo', 'model')),  # a torch function: fetches and runs code
    (argparse.Namespace, ()),  # a harmless class, allowed only when a call asks for it
], ids=['os.system', 'builtins.eval', 'torch.hub.load', 'argparse.Namespace'])
def test_reduce_of_a_callable_not_allowed_is_refused(func, args, tmp_path, capfd):
    path = tmp_path / 'reduce.pt'
    torch.save({'state_dict': {}, 'x': _Reduce(func, *args)}, path)
    with pytest.raises(pickle.UnpicklingError, match=func.__name__):
        compat.safe_load(str(path))
    assert 'CODE RAN' not in capfd.readouterr().out
    if func is argparse.Namespace:  # allowed for the call that names it
        assert isinstance(compat.safe_load(str(path), extra_globals=[func])['x'],
                          argparse.Namespace)


def test_an_attribute_path_of_an_allowed_class_is_refused(tmp_path):
    # PROTO 4, STACK_GLOBAL ('collections', 'OrderedDict.fromkeys'), REDUCE(([],)): protocol 4
    # names globals by a dotted path, which would reach any attribute of an allowed class.
    raw = (b'\x80\x04\x8c\x0bcollections\x8c\x14OrderedDict.fromkeys\x93]\x85R.')
    path = _save_raw(tmp_path / 'attribute.pt', raw)
    # (torch's own unpickler refuses protocol 4's opcodes before it reads the name)
    with pytest.raises(pickle.UnpicklingError, match='OrderedDict.fromkeys|Unsupported operand'):
        compat.safe_load(path)


def test_an_mmengine_checkpoint_with_everything_it_pickles_loads(tmp_path):
    """History buffers, numpy scalars and arrays, a Counter, a dtype, a device, config text,
    optimizer and scheduler state: what MMEngine's CheckpointHook writes."""
    from mmengine.logging import HistoryBuffer
    buffer = HistoryBuffer()
    for value in (np.float64(0.5), 0.25):
        buffer.update(value)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1)
    path = tmp_path / 'iter_2.pth'
    torch.save({'meta': {'cfg': "model = dict(type='CvT')\n", 'seed': np.int64(3),
                         'iter': 2, 'dtype': torch.float16, 'device': torch.device('cpu'),
                         'counts': collections.Counter(a=2), 'array': np.arange(3.)},
                'state_dict': model.state_dict(), 'optimizer': optimizer.state_dict(),
                'param_schedulers': [scheduler.state_dict()],
                'message_hub': {'log_scalars': {'loss': buffer}}}, path)
    loaded = compat.safe_load(str(path))
    assert loaded['meta']['seed'] == 3 and loaded['meta']['counts']['a'] == 2
    assert loaded['meta']['cfg'].startswith('model') and loaded['meta']['dtype'] == torch.float16
    np.testing.assert_array_equal(loaded['meta']['array'], np.arange(3.))
    assert loaded['message_hub']['log_scalars']['loss'].current() == 0.25
    for key, value in model.state_dict().items():
        assert torch.equal(loaded['state_dict'][key], value)
    assert loaded['optimizer']['state'][0]['step'] == optimizer.state_dict()['state'][0]['step']
    assert loaded['param_schedulers'][0]['start_factor'] == 0.1


def test_the_rules_before_torch_2_5_are_checked_on_this_torch_too(tmp_path):
    """The unpickler safe_load uses before torch 2.5 runs here as well, on the same files, so
    that every stack checks it (the prebuilt stack uses it for every checkpoint)."""
    from cvt_mm._weights_only import pickle_module
    module = pickle_module({**compat._torch_allowed_globals(), **compat._extra_globals})
    build = _save_raw(tmp_path / 'build.pt', b'\x80\x02ccollections\nCounter\nN}X\x08\x00'
                                             b'\x00\x00hijackedK\x01s\x86b.')
    with pytest.raises(pickle.UnpicklingError, match='BUILD of a builtins.type'):
        torch.load(build, pickle_module=module, weights_only=False)
    assert not hasattr(collections.Counter, 'hijacked')
    evil = tmp_path / 'evil.pt'
    torch.save({'x': _Reduce(os.system, 'echo CODE RAN')}, evil)
    with pytest.raises(pickle.UnpicklingError, match='GLOBAL (posix|os).system'):
        torch.load(evil, pickle_module=module, weights_only=False)
    good = tmp_path / 'good.pt'
    torch.save({'w': torch.arange(4.), 'n': np.float64(2.5), 's': {1, 2}}, good)
    loaded = torch.load(good, pickle_module=module, weights_only=False)
    assert torch.equal(loaded['w'], torch.arange(4.)) and loaded['n'] == 2.5
    assert loaded['s'] == {1, 2}


MMENGINE_LOADS = '''
import sys
from mmengine.config import Config
Config.fromfile(sys.argv[1])  # imports the config's custom_imports, as a toolbox's tools do
from mmengine.runner.checkpoint import CheckpointLoader
try:
    CheckpointLoader.load_checkpoint(sys.argv[2], map_location='cpu')
except Exception as err:  # noqa: BLE001
    print('REFUSED', type(err).__name__)
else:
    print('LOADED')
'''


def test_a_toolbox_tool_gets_safe_loading_from_the_config_s_custom_imports(tmp_path):
    """What a toolbox's own tools/train.py does with ``load_from`` (MMEngine's loader), with
    ``custom_imports`` of cvt_mm alone (a plugin only registers: MMEngine's own torch.load
    stays, which unpickles anything on torch < 2.6) and with ``cvt_mm.process`` added."""
    import subprocess
    import sys
    evil = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'x': _Reduce(print, 'CODE RAN')}, evil)
    said = {}
    for name, imports in (('plain', ['cvt_mm']), ('process', ['cvt_mm', 'cvt_mm.process'])):
        config = tmp_path / f'{name}.py'
        config.write_text(f'custom_imports = dict(imports={imports!r}, '
                          'allow_failed_imports=False)\n')
        proc = subprocess.run([sys.executable, '-c', MMENGINE_LOADS, str(config), str(evil)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said[name] = proc.stdout
    assert 'REFUSED' in said['process'] and 'CODE RAN' not in said['process'], said
    # Without it, MMEngine's torch.load decides: it ran the code exactly where it loaded.
    assert ('CODE RAN' in said['plain']) == ('LOADED' in said['plain']), said
