"""Evaluation metrics recomputed from the predictions ``tools/test.py --out`` dumped, with
pycocotools and NumPy alone (not the toolboxes' evaluators), for the tests to compare with
what the tool printed: a wrong number printed, not only a missing one, fails them.

Example::

    >>> coco_average_precisions('preds.pkl', 'ann.json', ('square', 'circle'), 'bbox')
    {'mAP': 0.0123, 'mAP_50': 0.0456, 'mAP_75': 0.0, 'mAP_s': -1.0, 'mAP_m': 0.0123, 'mAP_l': -1.0}
"""
from __future__ import annotations

import os.path as osp
import pickle
import re
from typing import Sequence

import numpy as np


def printed_metric(log: str, name: str) -> float:
    """The last value of the metric ``name`` (``coco/bbox_mAP``, ``mIoU``...) that a tool's
    output ``log`` printed; ``AssertionError`` with the log's end if none."""
    values = re.findall(rf'{re.escape(name)}: (-?[\d.]+)', log)
    assert values, f'{name} not printed:\n{log[-3000:]}'
    return float(values[-1])


def _array(value) -> np.ndarray:
    return value.numpy() if hasattr(value, 'numpy') else np.asarray(value)


# COCOeval's first six stats, under the names MMDetection's CocoMetric prints them with.
AP_NAMES = ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m', 'mAP_l')


def coco_average_precisions(dump: str, ann_file: str, classes: Sequence[str],
                            iou_type: str) -> dict:
    """COCO's APs (IoU 0.50:0.95, 0.50, 0.75; small, medium, large objects: ``stats[:6]``)
    of the dumped detections of every image of ``ann_file``, for the categories named
    ``classes`` (label ``i`` is the ``i``-th of them in the file's order, as MMDetection numbers
    them), with the detection limits MMDetection's ``CocoMetric`` evaluates at (100, 300,
    1000: the APs read the last).

    Args:
        dump (str): the ``--out`` file of ``tools/test.py`` (MMDetection's dump: boxes as
            x1, y1, x2, y2, masks as RLE).
        ann_file (str): the COCO annotation file evaluated.
        classes (Sequence[str]): the dataset's class names.
        iou_type (str): ``'bbox'`` or ``'segm'``.

    Returns:
        dict: ``AP_NAMES`` -> AP in [0, 1], or -1.0 where no object of that size exists.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    with open(dump, 'rb') as f:
        results = pickle.load(f)
    truth = COCO(ann_file)
    category_ids = truth.getCatIds(catNms=list(classes))
    detections = []
    for result in results:
        instances = result['pred_instances']
        boxes, scores = _array(instances['bboxes']), _array(instances['scores'])
        labels = _array(instances['labels'])
        for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
            detection = dict(image_id=int(result['img_id']), score=float(scores[i]),
                             category_id=category_ids[int(labels[i])])
            if iou_type == 'bbox':
                detection['bbox'] = [x1, y1, x2 - x1, y2 - y1]
            else:
                detection['segmentation'] = instances['masks'][i]
            detections.append(detection)
    assert detections, f'{dump} holds no detections'
    evaluation = COCOeval(truth, truth.loadRes(detections), iou_type)
    evaluation.params.catIds = category_ids
    evaluation.params.imgIds = truth.getImgIds()
    evaluation.params.maxDets = [100, 300, 1000]
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return {name: float(value) for name, value in zip(AP_NAMES, evaluation.stats)}


def mean_iou(dump: str, ann_dir: str, num_classes: int, reduce_zero_label: bool = True,
             ignore_index: int = 255) -> float:
    """The mean over classes of intersection over union, in percent, of the dumped
    segmentation maps against the label PNGs in ``ann_dir`` (named as the images), summed over
    all images first; pixels labelled ``ignore_index`` do not count, classes absent from both
    predictions and labels are left out of the mean.

    Args:
        dump (str): the ``--out`` file of ``tools/test.py`` (``pred_sem_seg`` per image, at
            the image's own size).
        ann_dir (str): the folder of the label PNGs.
        num_classes (int): the number of classes.
        reduce_zero_label (bool): label 0 is "other" (ignored) and class ``c`` is stored as
            ``c + 1``, as in ADE20K. Defaults to True.
        ignore_index (int): the label that does not count. Defaults to 255.

    Returns:
        float: the mIoU, in [0, 100].
    """
    from PIL import Image
    with open(dump, 'rb') as f:
        results = pickle.load(f)
    intersection, union = np.zeros(num_classes), np.zeros(num_classes)
    for result in results:
        prediction = _array(result['pred_sem_seg']['data']).squeeze(0)
        name = osp.splitext(osp.basename(result['img_path']))[0] + '.png'
        truth = np.array(Image.open(osp.join(ann_dir, name))).astype(np.int64)
        if reduce_zero_label:
            truth = np.where(truth == 0, ignore_index, truth - 1)
        assert prediction.shape == truth.shape, (name, prediction.shape, truth.shape)
        counted = truth != ignore_index
        prediction, truth = prediction[counted], truth[counted]
        for c in range(num_classes):
            intersection[c] += np.sum((prediction == c) & (truth == c))
            union[c] += np.sum((prediction == c) | (truth == c))
    present = union > 0
    return float(np.mean(intersection[present] / union[present]) * 100)
