"""Run a whole model exported by ``export_onnx.py`` on images, with NumPy, OpenCV and ONNX
Runtime alone (no torch, MMCV, MMEngine, the toolboxes or cvt_mm), and draw the results.

    python tools/deployment/onnx_inference.py MODEL.onnx IMAGE [IMAGE ...] [--out-dir DIR]
        [--score-thr T] [--json FILE] [--threads N]

Each image is read with OpenCV (BGR) and prepared as the config's test pipeline and
``data_preprocessor`` did at export time, from what the file's metadata stores: the
pipeline's ``Resize`` (keeping the aspect ratio or not), ``ResizeEdge`` and ``CenterCrop``;
channel order, mean and std; padding to the divisor (a graph of fixed size: resized to fit it,
then padded to it). The graph's results are mapped back to the image as it was read (boxes
divided by the resize factors and clipped, masks and class maps cropped to the resized image
and resized back) and drawn: boxes, class names, scores and masks of the detections above
``--score-thr`` (default: the test config's threshold), the class map over the image, or the
top-5 classes. ``--json`` writes the results (boxes in the image's pixels, scores, labels;
masks as their pixel counts; the picture's file) for other programs.

Differences from the toolboxes' own inference, all at the pixel level: a ``ResizeEdge`` of
the Pillow backend (MMPretrain's ImageNet test pipeline) is done with OpenCV's bicubic, not
Pillow's; masks and class maps of a resized image are resized back (MMDetection pastes the
masks at the original size; MMSegmentation resizes the logits before the argmax).
"""
from __future__ import annotations

import argparse
import json
import os
import os.path as osp
import sys
from typing import List, Optional, Sequence

import cv2
import numpy as np
import onnxruntime as ort

FORMAT = '1'  # cvt_mm.apis.end2end.metadata.FORMAT: the layout this tool reads
TASKS = ('instance-segmentation', 'detection', 'semantic-segmentation', 'classification')


class InputError(ValueError):
    """A file this tool cannot use; the message names it and what was expected."""


# --------------------------------------------------------------------------- the model
class Model:
    """An exported file, its session and what its metadata says.

    Example::

        >>> model = Model('mask_rcnn.onnx')
        >>> result = model.predict(read_image('demo.jpg'))
        >>> result['bboxes'].shape, result['labels'], result['masks'].shape
        ((3, 4), array([0, 2, 1]), (3, 480, 640))
    """

    def __init__(self, path: str, threads: Optional[int] = None):
        if not osp.isfile(path):
            raise InputError(f'{path}: no such file')
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(path, options,
                                                providers=['CPUExecutionProvider'])
        except Exception as e:  # not an ONNX file, or a broken one
            raise InputError(f'{path}: ONNX Runtime cannot load it ({type(e).__name__}: '
                             f'{e})') from e
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get('cvt_mm.format') != FORMAT or meta.get('cvt_mm.task') not in TASKS:
            raise InputError(
                f'{path}: no cvt_mm metadata of a whole model (expected cvt_mm.format={FORMAT} '
                f'and cvt_mm.task one of {", ".join(TASKS)}; found '
                f'{sorted(k for k in meta if k.startswith("cvt_mm.")) or "none"}). Export it '
                'with tools/deployment/export_onnx.py (--part model)')
        self.path, self.task = path, meta['cvt_mm.task']
        self.preprocess = json.loads(meta.get('cvt_mm.preprocess', '{}'))
        self.pipeline = json.loads(meta.get('cvt_mm.pipeline', '[]'))
        self.classes = json.loads(meta.get('cvt_mm.classes', 'null'))
        self.palette = json.loads(meta.get('cvt_mm.palette', 'null'))
        self.score_thr = float(meta.get('cvt_mm.score_thr', 0.3))
        self.sizes = json.loads(meta.get('cvt_mm.input_size', 'null'))
        graph_input = self.session.get_inputs()[0]
        self.input_name = graph_input.name
        self.fixed = [d if isinstance(d, int) else None for d in graph_input.shape[2:]]
        self.batch = graph_input.shape[0] if isinstance(graph_input.shape[0], int) else 1
        self._check_classes()

    def _check_classes(self) -> None:
        if not self.classes:
            raise InputError(f'{self.path}: its metadata lists no classes (cvt_mm.classes)')
        if self.task == 'classification':
            width = self.session.get_outputs()[0].shape[-1]
            if isinstance(width, int) and width != len(self.classes):
                raise InputError(f'{self.path}: the graph gives {width} logits but its '
                                 f'metadata lists {len(self.classes)} classes')

    def predict(self, image: np.ndarray) -> dict:
        """Results for one BGR image (H, W, 3) uint8, in its own pixels."""
        tensor, prep = prepare(image, self)
        batch = np.repeat(tensor[None], self.batch, axis=0)
        outputs = self.session.run(None, {self.input_name: batch})
        return restore([o[0] for o in outputs], self, prep, image.shape[:2])


# --------------------------------------------------------------------------- images
def read_image(path: str) -> np.ndarray:
    """The image at ``path`` as OpenCV reads it (BGR, uint8); ``InputError`` if it cannot."""
    image = cv2.imread(path, cv2.IMREAD_COLOR) if osp.isfile(path) else None
    if image is None:
        reason = 'no such file' if not osp.exists(path) else \
            'OpenCV cannot decode it (expected an image file: JPEG, PNG, BMP, TIFF, WebP...)'
        raise InputError(f'{path}: {reason}')
    return image


def _rescale(image: np.ndarray, scale, keep_ratio: bool, interpolation: int):
    """MMCV's ``imrescale`` (keep_ratio: as large as fits in ``scale`` = (w, h)) or
    ``imresize``; returns the image and its (w_scale, h_scale)."""
    h, w = image.shape[:2]
    if keep_ratio:
        sizes = scale if isinstance(scale, (list, tuple)) else (scale, scale)
        factor = min(max(sizes) / max(h, w), min(sizes) / min(h, w))
        size = (int(w * factor + 0.5), int(h * factor + 0.5))
    else:
        size = tuple(int(s) for s in scale)
    resized = cv2.resize(image, size, interpolation=interpolation)
    return resized, (size[0] / w, size[1] / h)


def prepare(image: np.ndarray, model: Model):
    """The graph's input (3, H, W) float32 for a BGR image, and how it was made: ``scale``
    (w, h factors), ``resized`` (h, w before padding), ``crop`` (x, y offset of a centre
    crop)."""
    scale, crop = (1.0, 1.0), (0, 0)
    for step in model.pipeline:
        if step['type'] == 'Resize' and 'scale' in step:
            image, factors = _rescale(image, step['scale'], step.get('keep_ratio', False),
                                      cv2.INTER_LINEAR)
            scale = (scale[0] * factors[0], scale[1] * factors[1])
        elif step['type'] == 'ResizeEdge':
            h, w = image.shape[:2]
            side = step['scale']
            short_is_w = w < h if step.get('edge', 'short') == 'short' else w > h
            size = (side, int(side * h / w)) if short_is_w or step.get('edge') == 'width' \
                else (int(side * w / h), side)
            image, factors = _rescale(image, size, False, cv2.INTER_CUBIC)
            scale = (scale[0] * factors[0], scale[1] * factors[1])
        elif step['type'] == 'CenterCrop':
            cw, ch = (step['crop_size'], ) * 2 if isinstance(step['crop_size'], int) \
                else step['crop_size']
            h, w = image.shape[:2]
            y, x = max(0, int(round((h - ch) / 2.))), max(0, int(round((w - cw) / 2.)))
            image, crop = image[y:y + ch, x:x + cw], (x, y)
    fixed = model.fixed
    if fixed[0] and fixed[1] and (image.shape[0] > fixed[0] or image.shape[1] > fixed[1]):
        image, factors = _rescale(image, (fixed[1], fixed[0]), True, cv2.INTER_LINEAR)
        scale = (scale[0] * factors[0], scale[1] * factors[1])
    pre = model.preprocess
    data = image.astype(np.float32)
    if pre.get('bgr_to_rgb'):
        data = data[..., ::-1]
    if 'mean' in pre:
        data = (data - np.float32(pre['mean'])) / np.float32(pre['std'])
    resized = data.shape[:2]
    target = list(resized)
    divisor = pre.get('pad_size_divisor', 1)
    for i in range(2):
        if fixed[i]:
            target[i] = fixed[i]
        else:
            target[i] = -(-target[i] // divisor) * divisor
            if model.sizes and model.sizes[('height', 'width')[i]][0] > target[i]:
                target[i] = model.sizes[('height', 'width')[i]][0]  # the graph's smallest
    padded = np.full((*target, 3), pre.get('pad_value', 0.0), np.float32)
    padded[:resized[0], :resized[1]] = data
    return (np.ascontiguousarray(padded.transpose(2, 0, 1)),
            dict(scale=scale, resized=resized, crop=crop))


def _back(plane: np.ndarray, prep: dict, shape, interpolation: int) -> np.ndarray:
    """A per-pixel map of the graph's input cropped to the resized image and resized to the
    image as read (its centre-crop offset restored)."""
    h, w = prep['resized']
    plane = plane[:h, :w]
    size = (int(round(w / prep['scale'][0])), int(round(h / prep['scale'][1])))
    plane = cv2.resize(plane, size, interpolation=interpolation)
    out = np.zeros(shape, plane.dtype)
    x, y = prep['crop']
    out[y:y + size[1], x:x + size[0]] = plane[:shape[0] - y, :shape[1] - x]
    return out


def restore(outputs: List[np.ndarray], model: Model, prep: dict, shape) -> dict:
    """One image's graph outputs in the image's own pixels."""
    if model.task == 'classification':
        logits = outputs[0].astype(np.float64)
        scores = np.exp(logits - logits.max())
        return dict(logits=outputs[0], scores=scores / scores.sum())
    if model.task == 'semantic-segmentation':
        seg = _back(outputs[0][0].astype(np.int32), prep, shape, cv2.INTER_NEAREST)
        if seg.max() >= len(model.classes):
            raise InputError(f'{model.path}: the graph gives class {int(seg.max())} but its '
                             f'metadata lists {len(model.classes)} classes')
        return dict(seg_map=seg.astype(np.int64))
    dets, labels = outputs[0], outputs[1]
    used = labels >= 0
    if used.any() and labels[used].max() >= len(model.classes):
        raise InputError(f'{model.path}: the graph gives label {int(labels[used].max())} but '
                         f'its metadata lists {len(model.classes)} classes')
    boxes = dets[used, :4] / np.float32([*prep['scale'], *prep['scale']])
    boxes += np.float32([*prep['crop'], *prep['crop']])
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, shape[1])
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, shape[0])
    result = dict(bboxes=boxes, scores=dets[used, 4], labels=labels[used])
    if len(outputs) > 2:
        masks = outputs[2][used]
        result['masks'] = np.stack([_back(m.astype(np.uint8), prep, shape, cv2.INTER_NEAREST)
                                    for m in masks]).astype(bool) if len(masks) else \
            np.zeros((0, *shape), bool)
    return result


# --------------------------------------------------------------------------- drawing
def colors(model: Model) -> np.ndarray:
    """(classes, 3) BGR colours: the dataset's palette, else fixed pseudo-random ones."""
    if model.palette and len(model.palette) >= len(model.classes):
        return np.array(model.palette, np.uint8)[:, ::-1]
    return np.random.RandomState(42).randint(40, 256, (len(model.classes), 3)).astype(np.uint8)


def draw(image: np.ndarray, result: dict, model: Model, score_thr: float) -> np.ndarray:
    """The results drawn on a copy of the BGR image."""
    canvas, palette = image.copy(), colors(model)
    if 'seg_map' in result:
        return cv2.addWeighted(canvas, 0.5, palette[result['seg_map']], 0.5, 0)
    if 'logits' in result:
        top = np.argsort(-result['scores'])[:5]
        for i, c in enumerate(top):
            cv2.putText(canvas, f'{model.classes[c]} {result["scores"][c]:.2f}',
                        (4, 16 + 16 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1)
        return canvas
    keep = result['scores'] >= score_thr
    for i in np.flatnonzero(keep)[::-1]:  # best drawn last, on top
        color = palette[result['labels'][i]]
        if 'masks' in result:
            region = result['masks'][i]
            canvas[region] = (0.5 * canvas[region] + 0.5 * color).astype(np.uint8)
        x1, y1, x2, y2 = (int(round(v)) for v in result['bboxes'][i])
        cv2.rectangle(canvas, (x1, y1), (x2, y2), tuple(int(c) for c in color), 1)
        text = f'{model.classes[result["labels"][i]]} {result["scores"][i]:.2f}'
        cv2.putText(canvas, text, (x1, max(10, y1 - 3)), cv2.FONT_HERSHEY_SIMPLEX, 0.35,
                    tuple(int(c) for c in color), 1)
    return canvas


def to_json(result: dict, model: Model, score_thr: float) -> dict:
    """What ``--json`` writes for one image."""
    if 'seg_map' in result:
        counts = np.bincount(result['seg_map'].ravel(), minlength=len(model.classes))
        return dict(pixels={model.classes[c]: int(n) for c, n in enumerate(counts) if n})
    if 'logits' in result:
        top = np.argsort(-result['scores'])[:5]
        return dict(top5=[[model.classes[c], float(result['scores'][c])] for c in top])
    keep = np.flatnonzero(result['scores'] >= score_thr)
    return dict(detections=[dict(
        label=int(result['labels'][i]), name=model.classes[result['labels'][i]],
        score=float(result['scores'][i]), box=[float(v) for v in result['bboxes'][i]],
        **({'mask_pixels': int(result['masks'][i].sum())} if 'masks' in result else {}))
        for i in keep])


# --------------------------------------------------------------------------- command line
def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(
        description='Run a whole model exported by export_onnx.py on images, without torch, '
        'and draw the results')
    parser.add_argument('model', help='the .onnx file (export_onnx.py --part model)')
    parser.add_argument('images', nargs='+', help='image files')
    parser.add_argument('--out-dir', default='onnx_results',
                        help='where the pictures go (default: %(default)s)')
    parser.add_argument('--score-thr', type=float,
                        help='detections drawn and listed from this score (default: the test '
                        'config\'s threshold, stored in the file)')
    parser.add_argument('--json', help='also write the results to this JSON file')
    parser.add_argument('--threads', type=int, help='ONNX Runtime intra-op threads')
    args = parser.parse_args(argv)
    if args.score_thr is not None and not 0 <= args.score_thr <= 1:
        parser.error(f'--score-thr must be in [0, 1], got {args.score_thr}')
    if args.threads is not None and args.threads < 1:
        parser.error(f'--threads must be >= 1, got {args.threads}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        model = Model(args.model, args.threads)
        images = [(path, read_image(path)) for path in args.images]  # all readable first
    except InputError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    score_thr = model.score_thr if args.score_thr is None else args.score_thr
    os.makedirs(args.out_dir, exist_ok=True)
    listed, written = {}, set()
    print(f'{args.model}: {model.task}, {len(model.classes)} classes, ONNX Runtime '
          f'{ort.__version__}')
    for path, image in images:
        try:
            result = model.predict(image)
        except InputError as e:
            print(f'error: {e}', file=sys.stderr)
            return 2
        name = stem = osp.splitext(osp.basename(path))[0]
        while name in written:  # images of the same name from different folders
            name = f'{stem}_{len(written)}'
        written.add(name)
        out = osp.join(args.out_dir, name + '.jpg')
        cv2.imwrite(out, draw(image, result, model, score_thr))
        listed[path] = found = dict(to_json(result, model, score_thr), picture=out)
        summary = (f'{len(found["detections"])} detections' if 'detections' in found else
                   f'top-1 {found["top5"][0][0]}' if 'top5' in found else
                   f'{len(found["pixels"])} classes present')
        print(f'  {path}: {summary} -> {out}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(model=args.model, task=model.task, score_thr=score_thr,
                           images=listed), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
