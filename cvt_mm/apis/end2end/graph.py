"""What :func:`cvt_mm.apis.deployment.export_onnx` does to and checks in a traced graph:
the modules it swaps while tracing so that sizes stay symbolic (:func:`exportable`), the size
range a dynamic graph holds for (:func:`input_sizes`, :func:`check_dynamic_range`), resizes
frozen at the example's size (:func:`fixed_size_resizes`), operators outside the ONNX
standard (:func:`non_standard_ops`) and the file's IR version (:func:`lowest_ir_version`).
"""
from __future__ import annotations

import contextlib
import functools
from typing import List, Sequence

import torch
from torch import nn

from ...models.matrix_resize import matrix_adaptive_avg_pool


def _integer_upsample(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """MMSegmentation's ``Upsample.forward`` with an integral scale factor kept an integer:
    ``int(size * 2.0)`` of a symbolic size is fixed at the example's value by torch.export,
    ``size * 2`` stays symbolic."""
    factor = int(module.scale_factor)
    size = [t * factor for t in x.shape[-2:]]
    return torch.nn.functional.interpolate(x, size, None, module.mode, module.align_corners)


@contextlib.contextmanager
def exportable(module: nn.Module):
    """Within the block, the modules of ``module`` that torch.export would write for the
    example's size alone compute in a way that keeps the size symbolic; outside it they are
    the toolboxes' own again, which the comparison with ONNX Runtime then checks this against.

    * ``nn.AdaptiveAvgPool2d`` with more than one output cell (UperNet's pyramid pooling)
      computes through :func:`~cvt_mm.models.matrix_resize.matrix_adaptive_avg_pool`: torch's
      exporter writes such a pool as an ``AveragePool`` whose kernel and stride are fixed from
      the example, so a dynamic graph silently averaged the wrong windows at any other size
      (1.8 absolute error on random data). One output cell (a global pool) is left alone.
    * MMSegmentation's ``Upsample`` with an integral ``scale_factor`` (Semantic FPN's scale
      heads) resizes to ``size * factor``: its ``int(size * factor)`` was baked in as the
      example's size (97 % of pixels right at another size).
    """
    patched = []
    for m in module.modules():
        if isinstance(m, nn.AdaptiveAvgPool2d) and m.output_size not in (1, (1, 1)):
            m.forward = functools.partial(matrix_adaptive_avg_pool, output_size=m.output_size)
            patched.append(m)
        elif (type(m).__name__ == 'Upsample' and type(m).__module__.startswith('mmseg.')
              and not m.size and isinstance(m.scale_factor, float)
              and m.scale_factor.is_integer()):
            m.forward = functools.partial(_integer_upsample, m)
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


def fixed_size_resizes(exported) -> List[str]:
    """The resizes of a dynamic ``ExportedProgram`` to a size fixed in the graph from a
    symbolic-size input: where a module computed its output size outside torch's symbolic
    sizes (``int()`` of a size), so the graph holds for the example's size alone. Each as
    the module path that ran it."""
    found = []
    for node in exported.graph.nodes:
        name = str(node.target)
        if node.op != 'call_function' or 'upsample' not in name:
            continue
        size = node.args[1] if len(node.args) > 1 else None
        source = node.args[0].meta.get('val') if hasattr(node.args[0], 'meta') else None
        if (isinstance(size, (list, tuple)) and size and all(isinstance(v, int) for v in size)
                and source is not None
                and any(isinstance(d, torch.SymInt) for d in source.shape[2:])):
            stack = node.meta.get('nn_module_stack') or {}
            path = list(stack.values())[-1][0] if stack else node.name
            found.append(f'{path} ({name.split(".")[-2]} to {list(size)})')
    return found


def input_sizes(exported, shape: Sequence[int]) -> dict:
    """``{'height': [low, high], 'width': [low, high]}``: the input sizes a dynamic
    ``ExportedProgram`` holds for, as torch.export's range constraints say (``high`` None:
    unbounded; ``[n, n]``: fixed)."""
    name = exported.graph_signature.user_inputs[0]
    node = next(n for n in exported.graph.nodes if n.op == 'placeholder' and n.name == name)
    sizes = {}
    for key, dim, example in zip(('height', 'width'), node.meta['val'].shape[2:], shape):
        if not isinstance(dim, torch.SymInt):
            sizes[key] = [int(dim), int(dim)]
            continue
        bounds = exported.range_constraints[dim.node.expr]
        try:
            high = int(bounds.upper)
        except Exception:  # sympy oo, torch int_oo
            high = None
        sizes[key] = [int(bounds.lower), None if high is None or high >= 2 ** 31 else high]
    return sizes


def check_dynamic_range(sizes: dict, shape: Sequence[int]) -> None:
    """``ValueError`` when torch.export made a dynamic graph hold for a bounded range only:
    at the example's size a feature level has one cell (a stride-128 level below 129
    pixels), and sizes are fixed where they change that. Nothing is written."""
    bounded = {k: v for k, v in sizes.items() if v[1] is not None}
    if bounded:
        said = ', '.join(f'{k} {v[0]}..{v[1]}' for k, v in bounded.items())
        raise ValueError(
            f'with --dynamic at --shape {shape[0]} {shape[1]} the graph would hold for {said} '
            'only: at this size a feature level of the model has a single cell, which '
            'torch.export fixes. Export at a larger --shape (e.g. twice the largest '
            'feature stride, plus a few pixels)')


def lowest_ir_version(model) -> int:
    """Stamp an ``onnx_ir`` model with the lowest IR version its opset allows (ONNX's own
    table), as older runtimes read the file only then: torch's exporter writes IR 10 at any
    opset, which ONNX Runtime reads from 1.18 on; opset 18 with IR 8 runs on 1.14 and later
    (the prebuilt stack has 1.15). Returns the version."""
    from onnx.helper import VERSION_TABLE
    opset = model.opset_imports.get('', None)
    versions = [row[1] for row in VERSION_TABLE if row[2] == opset]
    if versions and min(versions) < model.ir_version:
        model.ir_version = min(versions)
    return model.ir_version


def non_standard_ops(model) -> List[str]:
    """``domain::op`` of every node of an ``onnx_ir`` model (its functions included) outside
    ONNX's standard domain: what ONNX Runtime and TensorRT's parser would need a plugin for."""
    graphs = [model.graph, *getattr(model, 'functions', {}).values()]
    found = set()
    while graphs:
        graph = graphs.pop()
        for node in graph:
            if node.domain not in ('', 'ai.onnx'):
                found.add(f'{node.domain}::{node.op_type}')
            for attr in node.attributes.values():
                value = getattr(attr, 'value', None)
                if hasattr(value, 'inputs') and hasattr(value, 'outputs') and value is not graph:
                    graphs.append(value)  # subgraphs (If, Loop)
    return sorted(found)
