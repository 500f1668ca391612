"""The tools/ entry points as users run them: resuming, tools/test.py (metrics, --out,
--show-dir) and tools/image_demo.py. Two-process training is in test_distributed.py."""
import glob
import os.path as osp
import pickle

import pytest

from conftest import DIST_ITERATIONS
from detseg_utils import run_tool, seg_user_config


@pytest.fixture(scope='module')
def det_run(dist_train):
    """Mask R-CNN CvT-13 trained by two CPU processes (gloo) through tools/dist_train.sh."""
    config, work, proc = dist_train('mask_rcnn_cvt13_coco.py')
    return config, work / f'epoch_{DIST_ITERATIONS}.pth', proc


@pytest.fixture(scope='module')
def seg_run(tiny_data, tmp_path_factory):
    """UperNet CvT-13 stopped after 2 of 4 iterations, then continued with --resume."""
    root = tmp_path_factory.mktemp('seg')
    work = root / 'work'
    data = osp.join(tiny_data, 'ade')
    # The first process ends after iteration 2, as a killed job would after its checkpoint.
    stopped = seg_user_config(str(root / 'stopped.py'), data, str(work), max_iters=4)
    first = run_tool(['train.py', stopped, '--cfg-options', 'train_cfg.max_iters=2'])
    resumed = run_tool(['train.py', stopped, '--resume'])
    return stopped, work, first, resumed


def test_resume_continues_at_the_right_iteration(seg_run):
    _, work, first, resumed = seg_run
    first_log, resumed_log = first.stdout + first.stderr, resumed.stdout + resumed.stderr
    assert 'Iter(train) [2/' in first_log and 'Iter(train) [3/' not in first_log
    assert 'resumed' in resumed_log.lower() and 'iter_2.pth' in resumed_log
    assert 'Iter(train) [3/4]' in resumed_log and 'Iter(train) [4/4]' in resumed_log
    assert 'Iter(train) [1/4]' not in resumed_log and 'Iter(train) [2/4]' not in resumed_log
    assert osp.isfile(work / 'iter_4.pth')


def test_test_py_detection_metrics_dump_and_pictures(det_run, tmp_path):
    config, checkpoint, _ = det_run
    proc = run_tool(['test.py', config, str(checkpoint), '--work-dir',
                     str(tmp_path / 'eval'), '--out', str(tmp_path / 'results.pkl'),
                     '--show-dir', str(tmp_path / 'vis')])
    log = proc.stdout + proc.stderr
    assert 'coco/bbox_mAP' in log and 'coco/segm_mAP' in log
    with open(tmp_path / 'results.pkl', 'rb') as f:
        results = pickle.load(f)
    assert len(results) == 2 and 'pred_instances' in results[0]
    assert len(glob.glob(str(tmp_path / 'vis' / '*.jpg'))) == 2


def test_test_py_segmentation_pictures(seg_run, tmp_path):
    config, work, _, _ = seg_run
    proc = run_tool(['test.py', config, str(work / 'iter_4.pth'), '--work-dir',
                     str(tmp_path / 'eval'), '--show-dir', str(tmp_path / 'vis')])
    assert 'mIoU' in proc.stdout + proc.stderr
    assert len(glob.glob(str(tmp_path / 'vis' / '**' / '*.png'), recursive=True)) == 2


@pytest.mark.parametrize('task', ['det', 'seg'])
def test_image_demo_writes_a_picture(task, det_run, seg_run, tiny_data, tmp_path):
    if task == 'det':
        config, checkpoint, _ = det_run
        image = sorted(glob.glob(osp.join(tiny_data, 'coco', 'val2017', '*.jpg')))[0]
    else:
        config, work, _, _ = seg_run
        checkpoint = work / 'iter_4.pth'
        image = sorted(glob.glob(osp.join(tiny_data, 'ade', 'images', 'validation',
                                          '*.jpg')))[0]
    out = tmp_path / 'picture.jpg'
    run_tool(['image_demo.py', image, config, str(checkpoint), '--out-file', str(out)])
    from PIL import Image
    with Image.open(out) as picture:
        assert picture.size == Image.open(image).size


@pytest.mark.parametrize('content, message', [
    (b'', r'is empty \(0 bytes\)'),
    (b'<html>not an image</html>', r'cannot decode .* as an image'),
])
def test_image_demo_rejects_files_that_are_not_images(tmp_path, content, message):
    from tool_loader import load_tool
    image = tmp_path / 'photo.jpg'
    image.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_tool('image_demo').parse_args([str(image), 'config.py', 'ckpt.pth'])
