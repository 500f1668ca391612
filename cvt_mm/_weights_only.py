"""torch's weights-only unpickling rules with an allow-list, for the torch releases whose own
weights-only unpickler takes none (torch < 2.5; :func:`cvt_mm.compat.safe_load` uses torch's
own where it can). Reached only through ``safe_load``; not public API.

The rules are those of torch 2.13's ``torch._weights_only_unpickler``, restated over Python's
own unpickler:

* a global is only ever one of the allowed objects, looked up by its qualified name (never
  imported, never an attribute path);
* REDUCE calls, and NEWOBJ instantiates, only allowed objects;
* BUILD sets state only on a tensor, a parameter, an ``OrderedDict`` or an *instance* of an
  allowed class; an allowed class itself is no instance of one, so a file cannot change a
  class for the whole process (``collections.Counter.x = ...``);
* APPEND(S) only to lists, SETITEM(S) only to dicts, ADDITEMS only to sets;
* the opcodes that instantiate by other roads (INST, OBJ, the copyreg extension registry EXT*),
  text persistent ids and out-of-band buffers are refused.

A TorchScript archive never reaches an unpickler: ``torch.load`` hands it to
``torch.jit.load``, which runs its code; :func:`cvt_mm.compat.safe_load` refuses it first.
"""
from __future__ import annotations

import _compat_pickle
import io
import pickle
import types
from collections import Counter, OrderedDict

import torch

__all__ = ['pickle_module']

_SPECIAL_BUILD = (torch.Tensor, torch.nn.Parameter, OrderedDict)


def _refuse(opcode: str):
    def refuse(self):
        raise pickle.UnpicklingError(
            f'Weights only load failed: the pickle opcode {opcode} is not allowed (it builds '
            'objects by a road that weights-only loading closes)')
    return refuse


class _Unpickler(pickle._Unpickler):
    """Python's unpickler with the rules of the module doc; ``allowed`` maps qualified names
    to the allowed objects (set per load by :func:`pickle_module`)."""

    allowed: dict = {}
    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, **kwargs):
        super().__init__(file, **kwargs)
        self._allowed_ids = {id(v) for v in self.allowed.values()}

    def _is_allowed(self, obj) -> bool:
        return id(obj) in self._allowed_ids

    def find_class(self, module: str, name: str):
        if self.proto < 3 and self.fix_imports:  # Python 2's names (protocol 2, torch's)
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        key = f'{module}.{name}'
        if key in self.allowed:
            return self.allowed[key]
        raise pickle.UnpicklingError(
            f'Weights only load failed: unsupported GLOBAL {key} (not on the allow-list)')

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        if not self._is_allowed(func):
            raise pickle.UnpicklingError(
                f'Weights only load failed: REDUCE of {func!r}, which is not on the allow-list')
        self.stack[-1] = func(*args)

    def load_newobj(self):
        args = self.stack.pop()
        cls = self.stack.pop()
        if cls is torch.nn.Parameter:
            self.append(torch.nn.Parameter(*args))
        elif self._is_allowed(cls) and isinstance(cls, type):
            self.append(cls.__new__(cls, *args))
        else:
            raise pickle.UnpicklingError(
                f'Weights only load failed: NEWOBJ of {cls!r}, which is not an allowed class')

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        kind = type(inst)
        if kind is torch.Tensor:
            inst.set_(*state)  # legacy tensors
        elif kind is torch.nn.Parameter:
            inst.__setstate__(state)
        elif kind is OrderedDict:
            inst.__dict__.update(state)
        elif self._is_allowed(kind):
            setstate = getattr(inst, '__setstate__', None)
            if setstate is not None:
                setstate(state)
                return
            slotstate = None
            if isinstance(state, tuple) and len(state) == 2:
                state, slotstate = state
            if state:
                inst.__dict__.update(state)
            for k, v in (slotstate or {}).items():
                setattr(inst, k, v)
        else:
            raise pickle.UnpicklingError(
                f'Weights only load failed: BUILD of a {kind.__module__}.{kind.__qualname__}, '
                'which is not an instance of an allowed class')

    def _target(self, opcode: str, kinds: tuple):
        target = self.stack[-1]
        if type(target) not in kinds:
            raise pickle.UnpicklingError(
                f'Weights only load failed: {opcode} into a {type(target).__name__}; allowed '
                f'only into {", ".join(k.__name__ for k in kinds)}')
        return target

    def load_append(self):
        value = self.stack.pop()
        self._target('APPEND', (list, )).append(value)

    def load_appends(self):
        items = self.pop_mark()
        self._target('APPENDS', (list, )).extend(items)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self._target('SETITEM', (dict, OrderedDict, Counter))[key] = value

    def load_setitems(self):
        items = self.pop_mark()
        target = self._target('SETITEMS', (dict, OrderedDict, Counter))
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]

    def load_additems(self):
        items = self.pop_mark()
        self._target('ADDITEMS', (set, )).update(items)

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.APPEND[0]] = load_append
    dispatch[pickle.APPENDS[0]] = load_appends
    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.ADDITEMS[0]] = load_additems
    for _name in ('INST', 'OBJ', 'NEWOBJ_EX', 'EXT1', 'EXT2', 'EXT4', 'PERSID', 'NEXT_BUFFER',
                  'READONLY_BUFFER'):
        dispatch[getattr(pickle, _name)[0]] = _refuse(_name)
    del _name


def pickle_module(allowed: dict) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.load`` whose unpickler allows ``allowed`` (qualified
    name -> object) and nothing else, under the rules of the module doc.

    Example::

        >>> torch.load(path, pickle_module=pickle_module({'collections.OrderedDict':
        ...                                               OrderedDict}), weights_only=False)
    """
    unpickler = type('WeightsOnlyUnpickler', (_Unpickler, ), {'allowed': dict(allowed)})
    module = types.ModuleType('cvt_mm_weights_only_pickle')
    module.Unpickler = unpickler
    module.load = lambda f, **kw: unpickler(f, **kw).load()
    module.loads = lambda data, **kw: unpickler(io.BytesIO(data), **kw).load()
    return module
