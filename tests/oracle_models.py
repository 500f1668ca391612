"""Models whose predictions are known by construction, for tests of the metric pipeline
(tests/test_configs/test_metric_pipeline.py): registered in MMDetection's and MMSegmentation's
registries when a config imports this module (``custom_imports``), they replace a config's
model and predict the ground truth, changed in one known way, so that the metric
``tools/test.py`` prints is known before it runs.

* :class:`OracleDetector` reads the COCO annotation file the evaluator reads and predicts its
  boxes and masks at the original image size, every score 1: ``mode='truth'`` as they are,
  ``'shift'`` each box moved right by the fraction :data:`SHIFT` of its width, which leaves
  IoU :data:`SHIFTED_IOU` with its own (masks unmoved), ``'wrong_class'`` every object labelled
  with the next class.
* :class:`OracleSegmentor` predicts each image's label map, with every pixel of class
  ``confuse[0]`` predicted as ``confuse[1]`` when ``confuse`` is given.
"""
import numpy as np
import torch
from mmdet.models.detectors.base import BaseDetector
from mmdet.registry import MODELS as DET_MODELS
from mmengine.structures import InstanceData, PixelData
from mmseg.models.segmentors.base import BaseSegmentor
from mmseg.registry import MODELS as SEG_MODELS

# Box IoU after the shift: (w - d) / (w + d) = 0.62 for d = w * 0.38 / 1.62. Above the COCO
# thresholds 0.50, 0.55, 0.60 (not at one: a float rounding would decide), below 0.65 ... 0.95.
SHIFTED_IOU = 0.62
SHIFT = (1 - SHIFTED_IOU) / (1 + SHIFTED_IOU)


class _NoTraining:
    def loss(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} predicts only')

    def _forward(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} predicts only')

    def extract_feat(self, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} predicts only')


@DET_MODELS.register_module()
class OracleDetector(_NoTraining, BaseDetector):
    """The ground truth of ``ann_file`` as predictions (see the module doc).

    Args:
        ann_file (str): the COCO annotation file of the images evaluated.
        classes (list[str]): the dataset's classes (label ``i`` is the ``i``-th).
        mode (str): ``'truth'``, ``'shift'`` or ``'wrong_class'``.
    """

    def __init__(self, ann_file, classes, mode='truth', data_preprocessor=None,
                 init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        from pycocotools.coco import COCO
        if mode not in ('truth', 'shift', 'wrong_class'):
            raise ValueError(f"mode={mode!r}; allowed: 'truth', 'shift', 'wrong_class'")
        self.coco, self.mode = COCO(ann_file), mode
        self.category_ids = self.coco.getCatIds(catNms=list(classes))

    def predict(self, batch_inputs, batch_data_samples, rescale=True):
        for sample in batch_data_samples:
            boxes, labels, masks = [], [], []
            for ann in self.coco.loadAnns(self.coco.getAnnIds(imgIds=sample.img_id)):
                x, y, w, h = ann['bbox']
                dx = w * SHIFT if self.mode == 'shift' else 0.0
                boxes.append([x + dx, y, x + dx + w, y + h])
                label = self.category_ids.index(ann['category_id'])
                if self.mode == 'wrong_class':
                    label = (label + 1) % len(self.category_ids)
                labels.append(label)
                masks.append(self.coco.annToMask(ann))
            sample.pred_instances = InstanceData(
                bboxes=torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                labels=torch.tensor(labels, dtype=torch.long),
                scores=torch.ones(len(boxes)),
                masks=torch.from_numpy(np.stack(masks).astype(bool)) if masks else
                torch.zeros((0, *sample.ori_shape), dtype=torch.bool))
        return batch_data_samples


@SEG_MODELS.register_module()
class OracleSegmentor(_NoTraining, BaseSegmentor):
    """Each image's label map as its prediction, class ``confuse[0]`` predicted as
    ``confuse[1]`` (see the module doc)."""

    def __init__(self, confuse=None, data_preprocessor=None, init_cfg=None):
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.confuse = confuse

    def encode_decode(self, inputs, batch_data_samples):
        raise NotImplementedError('OracleSegmentor predicts only')

    def predict(self, inputs, data_samples=None):
        for sample in data_samples:
            labels = sample.gt_sem_seg.data.clone()
            if self.confuse is not None:
                labels[labels == self.confuse[0]] = self.confuse[1]
            sample.pred_sem_seg = PixelData(data=labels)
        return data_samples
