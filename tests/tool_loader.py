"""Import the scripts under tools/ in tests (tools/ is not a package)."""
import importlib.util
import os.path as osp
import sys

TOOLS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'tools')


def load_tool(name: str):
    """Import tools/<name>.py as a module. Its folder is put on sys.path because the scripts
    import their helpers (launch_utils, convert_weights) from there; appended, not prepended,
    so tools/test.py cannot shadow the standard library's `test` package."""
    if TOOLS not in sys.path:
        sys.path.append(TOOLS)
    spec = importlib.util.spec_from_file_location(f'cvt_mm_tool_{name}',
                                                  osp.join(TOOLS, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
