"""The tools/ entry points as users run them: resuming, tools/test.py (metrics, --out,
--show-dir) and tools/misc/image_demo.py. Two-process training is in test_distributed.py."""
import glob
import os.path as osp
import pickle
import re

import pytest
import torch

from helpers import (
    DEFAULT_MALLOC_ENV,
    DIST_ITERATIONS,
    EXIT_PROBE_ENV,
    assert_no_gloo_threads_at_exit,
    free_port,
    narrow_config,
    run_tool,
    seg_user_config,
)

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def det_run(dist_train):
    """Mask R-CNN CvT-13 trained by two CPU processes (gloo) through tools/dist_train.sh."""
    config, work, proc = dist_train('mask_rcnn_cvt13_coco.py')
    return config, work / f'epoch_{DIST_ITERATIONS}.pth', proc


@pytest.fixture(scope='module')
def seg_run(tiny_data, tmp_path_factory):
    """UperNet on a narrow CvT stopped after 2 of 4 iterations, then continued with
    --resume."""
    root = tmp_path_factory.mktemp('seg')
    work = root / 'work'
    data = osp.join(tiny_data, 'ade')
    # The first process ends after iteration 2, as a killed job would after its checkpoint.
    stopped = narrow_config(seg_user_config(str(root / 'stopped.py'), data, str(work),
                                            max_iters=4), 'seg')
    # Started by itself, as `python tools/train.py` is, with glibc's default allocator.
    first = run_tool(['train.py', stopped, '--cfg-options', 'train_cfg.max_iters=2'],
                     env=DEFAULT_MALLOC_ENV)
    resumed = run_tool(['train.py', stopped, '--resume'], warm=True)
    return stopped, work, first, resumed


def test_resume_continues_at_the_right_iteration(seg_run):
    _, work, first, resumed = seg_run
    first_log, resumed_log = first.stdout + first.stderr, resumed.stdout + resumed.stderr
    assert 'Iter(train) [2/' in first_log and 'Iter(train) [3/' not in first_log
    assert 'resumed' in resumed_log.lower() and 'iter_2.pth' in resumed_log
    assert 'Iter(train) [3/4]' in resumed_log and 'Iter(train) [4/4]' in resumed_log
    assert 'Iter(train) [1/4]' not in resumed_log and 'Iter(train) [2/4]' not in resumed_log
    assert osp.isfile(work / 'iter_4.pth')
    # Started without a launcher: glibc's default allocator, and the log says how to change it.
    assert "CPU allocator: glibc's default" in first_log and 'cpu_malloc.sh' in first_log


@pytest.fixture(scope='module')
def det_eval(det_run, tmp_path_factory):
    """tools/test.py on ``det_run``'s checkpoint in one process: (log, results.pkl, pictures)."""
    config, checkpoint, _ = det_run
    root = tmp_path_factory.mktemp('det_eval')
    proc = run_tool(['test.py', config, str(checkpoint), '--work-dir', str(root / 'eval'),
                     '--out', str(root / 'results.pkl'), '--show-dir', str(root / 'vis')],
                    warm=True)
    return proc.stdout + proc.stderr, root / 'results.pkl', root / 'vis'


def _test_metrics(log: str) -> dict:
    """The metrics of the final ``Epoch(test)`` line."""
    line = [ln for ln in log.splitlines() if '(test)' in ln and 'coco/' in ln][-1]
    return dict(re.findall(r'(coco/\S+): (\S+)', line))


def test_test_py_detection_metrics_dump_and_pictures(det_eval):
    log, out, vis = det_eval
    assert 'coco/bbox_mAP' in log and 'coco/segm_mAP' in log
    with open(out, 'rb') as f:
        results = pickle.load(f)
    assert len(results) == 2 and 'pred_instances' in results[0]
    assert len(glob.glob(str(vis / '*.jpg'))) == 2


def test_dist_test_sh_evaluates_on_two_processes_as_on_one(det_run, det_eval, tmp_path):
    """Each rank predicts its share of the images; rank 0 gathers them in dataset order and
    evaluates: the same predictions and metrics as one process. Both ranks end with no gloo
    thread left (the runner's DDP wrapper held the group past destroy_process_group)."""
    config, checkpoint, _ = det_run
    one_log, one_out, _ = det_eval
    proc = run_tool(['dist_test.sh', config, str(checkpoint), '2', '--work-dir',
                     str(tmp_path / 'eval'), '--out', str(tmp_path / 'results.pkl')],
                    env=dict(PORT=str(free_port()), **EXIT_PROBE_ENV, **DEFAULT_MALLOC_ENV))
    log = proc.stdout + proc.stderr
    assert 'Distributed training: True' in log and 'GPU number: 2' in log, log[-3000:]
    # The launcher's malloc setting reached the ranks (tests/test_engine/test_allocator.py).
    assert 'CPU allocator: large freed blocks reused' in log, log[-3000:]
    assert _test_metrics(log) == _test_metrics(one_log)
    with open(one_out, 'rb') as f:
        one = pickle.load(f)
    with open(tmp_path / 'results.pkl', 'rb') as f:
        two = pickle.load(f)
    assert [r['img_id'] for r in two] == [r['img_id'] for r in one]
    assert all(len(r['pred_instances']['scores']) for r in one)  # boxes to compare
    for a, b in zip(one, two):
        for key in ('bboxes', 'scores', 'labels'):
            assert torch.allclose(torch.as_tensor(a['pred_instances'][key]),
                                  torch.as_tensor(b['pred_instances'][key]), atol=1e-4), key
    assert_no_gloo_threads_at_exit(log, ranks=2)


def test_test_py_segmentation_pictures(seg_run, tmp_path):
    config, work, _, _ = seg_run
    proc = run_tool(['test.py', config, str(work / 'iter_4.pth'), '--work-dir',
                     str(tmp_path / 'eval'), '--show-dir', str(tmp_path / 'vis')], warm=True)
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
    run_tool(['misc/image_demo.py', image, config, str(checkpoint), '--out-file', str(out)],
             warm=True)
    from PIL import Image
    with Image.open(out) as picture:
        assert picture.size == Image.open(image).size


@pytest.mark.parametrize('content, message', [
    (b'', r'is empty \(0 bytes\)'),
    (b'<html>not an image</html>', r'cannot decode .* as an image'),
])
def test_image_demo_rejects_files_that_are_not_images(tmp_path, content, message):
    from helpers import load_tool
    image = tmp_path / 'photo.jpg'
    image.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_tool('misc/image_demo').parse_args([str(image), 'config.py', 'ckpt.pth'])


@pytest.fixture(scope='module')
def misfits(det_run, tiny_data, tmp_path_factory):
    """What users pass by mistake: the 3-class checkpoint with a 5-class config, and a
    backbone-only file with the right config."""
    from helpers import det_user_config
    config, checkpoint, _ = det_run
    root = tmp_path_factory.mktemp('misfits')
    five = det_user_config(str(root / 'five.py'), 'mask_rcnn_cvt13_coco.py',
                           osp.join(tiny_data, 'coco'), str(root / 'work'))
    with open(five, 'a') as f:
        f.write("model = dict(roi_head=dict(bbox_head=dict(num_classes=5), "
                "mask_head=dict(num_classes=5)))\n")
    backbone_only = str(root / 'backbone.pth')
    run_tool(['model_converters/convert_weights.py', str(checkpoint), backbone_only], warm=True)
    return dict(config=config, checkpoint=str(checkpoint), five=five,
                backbone_only=backbone_only, root=root)


@pytest.mark.parametrize('case, message', [
    ('classes', r'roi_head\.bbox_head\.fc_cls\.weight: checkpoint \(4, 1024\) vs model '
                r'\(6, 1024\).*another number of classes'),
    ('backbone_only', r'parameters and buffers are not in it.*holds no backbone\.\* keys'),
])
def test_test_py_refuses_a_checkpoint_that_does_not_fit(misfits, case, message):
    config, checkpoint = ((misfits['five'], misfits['checkpoint']) if case == 'classes'
                          else (misfits['config'], misfits['backbone_only']))
    proc = run_tool(['test.py', config, checkpoint, '--work-dir', str(misfits['root'] / case)],
                    expect_success=False, warm=True)
    err = proc.stderr
    assert proc.returncode != 0 and re.search(message, err, re.S), err[-3000:]
    assert 'Nothing was evaluated; --allow-partial' in err
    assert 'coco/bbox_mAP' not in proc.stdout + err


def test_test_py_allow_partial_evaluates_on_purpose(misfits):
    proc = run_tool(['test.py', misfits['config'], misfits['backbone_only'], '--allow-partial',
                     '--work-dir', str(misfits['root'] / 'partial')], warm=True)
    assert 'coco/bbox_mAP' in proc.stdout + proc.stderr


def test_image_demo_refuses_a_checkpoint_that_does_not_fit(misfits, tiny_data, tmp_path):
    image = sorted(glob.glob(osp.join(tiny_data, 'coco', 'val2017', '*.jpg')))[0]
    proc = run_tool(['misc/image_demo.py', image, misfits['five'], misfits['checkpoint'],
                     '--out-file', str(tmp_path / 'out.jpg')], expect_success=False, warm=True)
    assert proc.returncode != 0 and 'another number of classes' in proc.stderr
    assert 'Nothing was drawn' in proc.stderr and not (tmp_path / 'out.jpg').exists()
