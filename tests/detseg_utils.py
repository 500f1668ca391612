"""Helpers shared by the detection/segmentation tests: tiny datasets made by the project's own
tool, user configs that inherit the real configs, and running the real tools/ scripts."""
import os
import os.path as osp
import subprocess
import sys

from cvt_mm.testing import write_user_config

from tool_loader import load_tool  # noqa: F401  (re-exported for the detseg tests)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = osp.join(ROOT, 'configs')
IMAGE_SIZE = 96


def make_tiny_data(out: str) -> str:
    load_tool('misc/make_demo_data').main([
        '--out', out, '--size', str(IMAGE_SIZE), '--coco-train', '4', '--coco-val', '2',
        '--ade-train', '4', '--ade-val', '2', '--max-objects', '3', '--seed', '1'])
    return out


def det_user_config(path: str, base: str, data_root: str, work_dir: str, max_epochs: int = 1,
                    **extra) -> str:
    """A user's config: inherit ``base`` (a file under configs/), train on the tiny
    COCO-layout shapes data with its three classes, from scratch, ``max_epochs`` epochs of
    2 iterations (4 images, batch 2) on one process."""
    return write_user_config(path, base, data_root, work_dir, image_size=IMAGE_SIZE,
                             max_epochs=max_epochs, **extra)


def seg_user_config(path: str, data_root: str, work_dir: str, max_iters: int = 2,
                    base: str = 'upernet_cvt13_ade20k.py', **extra) -> str:
    """A user's config: inherit a UperNet config at a 64 px crop on the tiny ADE-layout
    data, from scratch, ``max_iters`` iterations."""
    return write_user_config(path, base, data_root, work_dir, image_size=64,
                             max_iters=max_iters, **extra)


def run_tool(args, timeout=300, env=None, expect_success=True) -> subprocess.CompletedProcess:
    """Run a tools/ script (python or bash) from the repository root; unless
    ``expect_success=False``, fail the test with its output when it fails."""
    full_env = dict(os.environ, **(env or {}))
    full_env['PYTHONPATH'] = ROOT + os.pathsep + full_env.get('PYTHONPATH', '')
    if args[0].endswith('.sh'):
        command = ['bash', osp.join(ROOT, 'tools', args[0]), *args[1:]]
        full_env.setdefault('PYTHON', sys.executable)
    else:
        command = [sys.executable, osp.join(ROOT, 'tools', args[0]), *args[1:]]
    proc = subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0 or not expect_success, (
        f'{" ".join(command)} failed ({proc.returncode}):\n'
        f'{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    return proc
