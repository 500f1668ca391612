"""Real MMEngine runners train the real Mask R-CNN / RetinaNet / UperNet configs for a few
iterations on tiny generated data and evaluate them (COCO bbox/segm mAP, mIoU)."""
import math
import os.path as osp

import pytest
from mmengine.config import Config
from mmengine.runner import Runner

import cvt_mm  # noqa: F401

from helpers import det_user_config, seg_user_config

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow


def train_and_validate(config_path, experiment, options=None):
    """Train with a real Runner, which validates after the last epoch/iteration; return the
    runner, every iteration's losses and the validation metrics it logged. ``options``
    (``{'a.b': value}``) override the config as ``--cfg-options`` would."""
    cfg = Config.fromfile(config_path)
    if options:
        cfg.merge_from_dict(options)
    cfg.experiment_name = experiment  # distinct loggers per runner
    # The toolboxes' runtimes name their visualizer 'visualizer', and MMEngine keeps one per
    # name for the whole process: without a name of its own, a later test writes into an
    # earlier (passed, so deleted) test's folder.
    cfg.visualizer.name = experiment
    runner = Runner.from_cfg(cfg)
    runner.train()
    scalars = runner.message_hub.log_scalars
    losses = {key[len('train/'):]: list(scalars[key].data[0])
              for key in scalars if key.startswith('train/') and 'loss' in key}
    metrics = {key[len('val/'):]: scalars[key].current()
               for key in scalars if key.startswith('val/')}
    return runner, losses, metrics


def assert_finite_losses(losses, expected_keys, iterations):
    assert expected_keys <= set(losses)
    for key, values in losses.items():
        assert len(values) == iterations, key
        assert all(math.isfinite(v) for v in values), (key, values)
    assert all(v > 0 for v in losses['loss'])


@pytest.mark.parametrize('base, experiment', [
    # A user's own config: inherits the real CvT-13 config, changes dataset and num_classes.
    ('mask_rcnn_cvt13_coco.py', 'user_cvt13'),
    ('mask_rcnn_cmt_ti_coco.py', 'user_cmt_ti'),
])
def test_mask_rcnn_user_config_trains_and_evaluates(tiny_data, tmp_path, base, experiment):
    path = det_user_config(str(tmp_path / 'my_shapes_config.py'), base,
                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'))
    runner, losses, metrics = train_and_validate(path, experiment)
    assert runner.model.roi_head.bbox_head.num_classes == 3
    assert runner.model.roi_head.mask_head.num_classes == 3
    assert runner.iter == 2  # 4 images, batch 2, one epoch
    assert_finite_losses(losses, {'loss', 'loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls',
                                  'loss_bbox', 'loss_mask'}, iterations=2)
    for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50'):
        assert 0 <= metrics[key] <= 1, key
    assert osp.isfile(osp.join(tmp_path, 'work', 'epoch_1.pth'))


@pytest.mark.parametrize('base, experiment', [
    ('retinanet_cvt13_coco.py', 'user_retina_cvt13'),
    ('retinanet_cmt_s_coco.py', 'user_retina_cmt_s'),
])
def test_retinanet_user_config_trains_and_evaluates(tiny_data, tmp_path, base, experiment):
    path = det_user_config(str(tmp_path / 'my_shapes_config.py'), base,
                           osp.join(tiny_data, 'coco'), str(tmp_path / 'work'))
    # Two iterations from scratch leave every focal-loss score near its 0.01 prior, under the
    # 0.05 test threshold: without it the evaluator sees boxes (and reports mAP) at all.
    runner, losses, metrics = train_and_validate(path, experiment,
                                                 {'model.test_cfg.score_thr': 0.0})
    assert runner.model.bbox_head.num_classes == 3
    assert type(runner.optim_wrapper.optimizer).__name__ == 'AdamW'
    assert runner.iter == 2  # 4 images, batch 2, one epoch
    assert_finite_losses(losses, {'loss', 'loss_cls', 'loss_bbox'}, iterations=2)
    for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50'):
        assert 0 <= metrics[key] <= 1, key
    assert 'coco/segm_mAP' not in metrics
    assert osp.isfile(osp.join(tmp_path, 'work', 'epoch_1.pth'))


def test_upernet_cvt13_trains_and_evaluates(tiny_data, tmp_path):
    path = seg_user_config(str(tmp_path / 'seg.py'), osp.join(tiny_data, 'ade'),
                           str(tmp_path / 'work'), max_iters=2)
    runner, losses, metrics = train_and_validate(path, 'upernet_cvt13')
    assert runner.iter == 2
    assert_finite_losses(losses, {'loss', 'decode.loss_ce', 'aux.loss_ce'}, iterations=2)
    assert 0 <= metrics['mIoU'] <= 100 and 0 <= metrics['aAcc'] <= 100
