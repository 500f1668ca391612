"""The metrics ``tools/test.py`` prints, on predictions whose metric is known by construction
(tests/oracle_models.py: the ground truth, changed in one known way), through our configs'
evaluators (MMDetection's ``CocoMetric``, MMSegmentation's ``IoUMetric``) on the tiny data:
a metric computed wrongly, or printed as a constant, fails here, where the comparison of
printed and recomputed metrics (test_every_model.py) cannot tell, since both sides run the same
pycocotools evaluation."""
import os
import os.path as osp

import numpy as np
import pytest
import torch
from PIL import Image

from dumped_metrics import printed_metric
from helpers import ROOT, SEG_CLASSES, SHAPES, head_user_config, run_tool

pytestmark = pytest.mark.slow

ORACLE_ENV = dict(PYTHONPATH=osp.join(ROOT, 'tests'))


def evaluate(tmp_path, base, tiny_data, model: str) -> str:
    """``tools/test.py`` on a user config of ``base`` whose model is ``model`` (an oracle's
    config); what it printed."""
    config = head_user_config(str(tmp_path / 'user.py'), base, tiny_data, str(tmp_path / 'w'))
    with open(config, 'a') as f:
        f.write("custom_imports = dict(imports=['cvt_mm', 'oracle_models'], "
                'allow_failed_imports=False)\n'
                f'model = dict(_delete_=True, {model})\n')
    checkpoint = tmp_path / 'oracle.pth'
    torch.save({'state_dict': {}}, checkpoint)  # an oracle has no weights
    proc = run_tool(['test.py', config, str(checkpoint), '--work-dir', str(tmp_path / 'eval')],
                    env=ORACLE_ENV, timeout=600)
    return proc.stdout + proc.stderr


# mode -> (bbox mAP, mAP_50, mAP_75), (segm mAP, mAP_50, mAP_75). Shifted boxes overlap their
# own at IoU 0.62: matched at the thresholds 0.50, 0.55, 0.60 of the ten (3/10), not at 0.75;
# their masks are not moved.
DETECTION = {
    'truth': ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
    'shift': ((0.3, 1.0, 0.0), (1.0, 1.0, 1.0)),
    'wrong_class': ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),
}


@pytest.mark.parametrize('mode', sorted(DETECTION))
def test_coco_metrics_of_known_detections(mode, tiny_data, tmp_path):
    ann_file = osp.join(tiny_data, 'coco', 'annotations', 'instances_val2017.json')
    log = evaluate(tmp_path, 'mask_rcnn_cvt13_coco.py', tiny_data,
                   f"type='OracleDetector', ann_file={ann_file!r}, classes={list(SHAPES)!r}, "
                   f"mode={mode!r}, data_preprocessor=dict(type='DetDataPreprocessor')")
    for kind, expected in zip(('bbox', 'segm'), DETECTION[mode]):
        got = tuple(printed_metric(log, f'coco/{kind}_{name}')
                    for name in ('mAP', 'mAP_50', 'mAP_75'))
        assert got == pytest.approx(expected, abs=1e-3), (kind, got)


def label_maps(tiny_data) -> list:
    """The validation label maps as the config reads them (``reduce_zero_label``: 0 is
    ignored, 1..3 become 0..2)."""
    folder = osp.join(tiny_data, 'ade', 'annotations', 'validation')
    maps = []
    for name in sorted(p for p in os.listdir(folder) if p.endswith('.png')):
        raw = np.array(Image.open(osp.join(folder, name))).astype(np.int64)
        maps.append(np.where(raw == 0, 255, raw - 1))
    return maps


def expected_miou(maps: list, num_classes: int, confuse=None) -> float:
    """The mean IoU (%) of predicting ``maps`` with ``confuse[0]`` as ``confuse[1]``, counted
    here with NumPy: per class intersection over union, classes with an empty union left out."""
    intersection, union = np.zeros(num_classes), np.zeros(num_classes)
    for truth in maps:
        valid = truth != 255
        pred = truth.copy()
        if confuse:
            pred[truth == confuse[0]] = confuse[1]
        for c in range(num_classes):
            t, p = (truth == c) & valid, (pred == c) & valid
            intersection[c] += (t & p).sum()
            union[c] += (t | p).sum()
    present = union > 0
    return float((intersection[present] / union[present]).mean() * 100)


@pytest.mark.parametrize('confuse', [None, (0, 1)])
def test_miou_of_known_label_maps(confuse, tiny_data, tmp_path):
    maps = label_maps(tiny_data)
    counts = [sum(int((m == c).sum()) for m in maps) for c in range(len(SEG_CLASSES))]
    assert min(counts[:2]) > 0  # both classes of the confusion are in the images
    expected = expected_miou(maps, len(SEG_CLASSES), confuse)
    if confuse is None:
        assert expected == 100.0
    else:  # class 0 lost, class 1's IoU |1| / (|0| + |1|), the others exact
        others = sum(1 for c in counts[2:] if c)
        assert expected == pytest.approx(100 * (counts[1] / (counts[0] + counts[1]) + others)
                                         / (2 + others))
    log = evaluate(tmp_path, 'upernet_cvt13_ade20k.py', tiny_data,
                   f"type='OracleSegmentor', confuse={confuse!r}, "
                   "data_preprocessor=dict(type='SegDataPreProcessor')")
    assert printed_metric(log, 'mIoU') == pytest.approx(round(expected, 2), abs=0.006)
