"""One case of ``benchmark.py compare``, timed in the tree that ``PYTHONPATH`` puts first: run as
a script (``python benchmarks/compare_case.py CASE JSON``), not as part of the ``benchmarks``
package, so that the same measuring code times the current tree and an older one, whose own
benchmarks may differ. It uses only what every tree since the first has: ``import cvt_mm``,
MMEngine's registry, and the tree's own ``configs/mask_rcnn_cvt13_coco.py``.

Cases (:data:`CASES`): CvT-13 and CMT-S forward (``infer``: eval, no grad) and training step
(``train``: forward, backward of the outputs' means), at 224 and 800x1333, and one Mask R-CNN
CvT-13 training iteration (preprocessing, forward, losses, backward) on a synthetic batch of two
images. Prints one JSON line: median seconds, every timed run, peak resident set, and where
cvt_mm was imported from.
"""
import json
import os
import os.path as osp
import resource
import statistics
import sys
import time

import torch

CASES = {
    f'{name}-{mode}-{size}': dict(model=model, mode=mode, size=shape)
    for name, model in (('cvt13', dict(type='CvT', arch='13')),
                        ('cmt_s', dict(type='CMT', arch='s')))
    for mode in ('infer', 'train')
    for size, shape in (('224', (224, 224)), ('800x1333', (800, 1333)))
}
CASES['mask_rcnn_cvt13-iter-640'] = dict(config='configs/mask_rcnn_cvt13_coco.py', size=(640, 640))


def _backbone(case: dict):
    from mmengine.registry import MODELS
    model = MODELS.build(dict(case['model']))
    model.init_weights()
    model.train(case['mode'] == 'train')
    x = torch.randn(1, 3, *case['size'])

    def step():
        if case['mode'] == 'infer':
            with torch.no_grad():
                return model(x)
        sum(o.float().mean() for o in model(x)).backward()
        model.zero_grad(set_to_none=True)

    return step


def _mask_rcnn(case: dict, tree: str):
    from mmdet.registry import MODELS
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.structures import InstanceData
    init_default_scope('mmdet')
    cfg = Config.fromfile(osp.join(tree, case['config']))
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    h, w = case['size']
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen))
        boxes = torch.tensor([[40., 60., 300., 380.], [320., 200., 600., 560.]])
        masks = torch.zeros(2, h, w, dtype=torch.uint8)
        for i, (x1, y1, x2, y2) in enumerate(boxes.int().tolist()):
            masks[i, y1:y2, x1:x2] = 1
        sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                             pad_shape=(h, w), scale_factor=(1., 1.)))
        sample.gt_instances = InstanceData(bboxes=boxes, labels=torch.tensor([0, 1]),
                                           masks=BitmapMasks(masks.numpy(), h, w))
        samples.append(sample)

    def step():
        data = model.data_preprocessor(dict(inputs=inputs, data_samples=samples), True)
        loss, _ = model.parse_losses(model(**data, mode='loss'))
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, out = argv[0], argv[1]
    warmup = int(os.environ.get('COMPARE_WARMUP', 1))
    runs = int(os.environ.get('COMPARE_RUNS', 3))
    torch.set_num_threads(int(os.environ.get('COMPARE_THREADS', os.cpu_count())))
    torch.manual_seed(0)
    import cvt_mm
    tree = osp.dirname(osp.dirname(osp.abspath(cvt_mm.__file__)))
    case = CASES[name]
    step = _mask_rcnn(case, tree) if 'config' in case else _backbone(case)
    times = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    result = dict(case=name, tree=tree, seconds=statistics.median(times), runs=times,
                  peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    with open(out, 'w') as f:
        json.dump(result, f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
