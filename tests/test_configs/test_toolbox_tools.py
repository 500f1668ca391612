"""Our configs under the toolboxes' own ``tools/train.py`` (MMDetection's, MMSegmentation's),
as a user who keeps their own tools runs them: ``custom_imports=['cvt_mm']`` in our configs
is all those tools get from us, so training, and resuming (whose checkpoint holds MMEngine's
message hub, refused by torch's safe loading without what ``import cvt_mm`` registers), must
work with nothing else."""
import importlib
import os.path as osp
import subprocess
import sys

import pytest

from helpers import ROOT, det_user_config, narrow_config, seg_user_config

pytestmark = pytest.mark.slow


def toolbox_train_py(toolbox: str) -> str:
    """The toolbox's own tools/train.py, as pip installs it (``.mim/tools``)."""
    path = osp.join(osp.dirname(importlib.import_module(toolbox).__file__), '.mim', 'tools',
                    'train.py')
    if not osp.isfile(path):
        pytest.skip(f'{toolbox} is installed without its tools ({path})')
    return path


@pytest.mark.parametrize('toolbox', ['mmdet', 'mmseg'])
def test_the_toolboxs_own_train_py_trains_and_resumes_our_config(toolbox, tiny_data, tmp_path):
    work = tmp_path / 'work'
    if toolbox == 'mmdet':  # two epochs of two iterations
        user = det_user_config(str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                               osp.join(tiny_data, 'coco'), str(work), max_epochs=2)
        first, last = 'train_cfg.max_epochs=1', 'epoch_2.pth'
    else:
        user = seg_user_config(str(tmp_path / 'user.py'), osp.join(tiny_data, 'ade'),
                               str(work), max_iters=4)
        first, last = 'train_cfg.max_iters=2', 'iter_4.pth'
    config = narrow_config(user, 'det' if toolbox == 'mmdet' else 'seg')
    train_py = toolbox_train_py(toolbox)

    def train(*args):
        # From a folder of the user's: nothing of this checkout on the path but the package.
        proc = subprocess.run([sys.executable, train_py, config, *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600,
                              env={'PYTHONPATH': ROOT, 'PATH': '/usr/bin:/bin',
                                   'OMP_NUM_THREADS': '1', 'HOME': str(tmp_path)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    train('--cfg-options', first)
    assert not (work / last).exists()
    log = train('--resume')
    assert 'resumed' in log.lower(), log[-3000:]
    assert (work / last).exists()
