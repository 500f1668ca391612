"""Import the scripts under tools/ in tests (tools/ is not a package)."""
import importlib.util
import os.path as osp
import sys

TOOLS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'tools')


def load_tool(name: str):
    """Import tools/<name>.py as a module (``name`` may hold a subfolder:
    ``'analysis_tools/gpu_check'``). Its folder is put on sys.path, as Python does when it
    runs a script, because a script may import a sibling (extract_backbone.py imports
    convert_weights.py); appended, not prepended, so tools/test.py cannot shadow the
    standard library's `test` package."""
    folder = osp.dirname(osp.join(TOOLS, f'{name}.py'))
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(f'cvt_mm_tool_{name.replace("/", "_")}',
                                                  osp.join(TOOLS, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
