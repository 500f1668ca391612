"""Draw a trained detector's, segmentor's or classifier's prediction on any image.

    python tools/misc/image_demo.py IMAGE CONFIG CHECKPOINT --out-file out.jpg

A detection config (``default_scope='mmdet'``) gives boxes, masks and labels; a segmentation
config (``default_scope='mmseg'``) gives the class map blended over the image; a classification
config (``default_scope='mmpretrain'``) gives the predicted class and its score.

The model, its checkpoint, class names, palette and test pipeline come from the toolboxes'
inferencers (``DetInferencer``, ``MMSegInferencer``, ``ImageClassificationInferencer``), as in
docs/python_api.md. What this tool adds: it refuses a checkpoint that does not fit the config
(the inferencers load what fits and warn), writes one picture to ``--out-file``, and draws
detections at a multiple of the image size with larger labels and only the best boxes, where
the inferencer draws at the image's size (``cvt_mm.apis.visualization``).
"""
import argparse
import os
import os.path as osp

import mmcv
from mmengine.config import Config, DictAction

import cvt_mm  # registers CvT/CMT; main() calls cvt_mm.setup_process()
from cvt_mm.apis.visualization import best_predictions, enlarge_labels, predict_upsampled
from cvt_mm.checkpoint import checkpoint_misfit


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('img', help='image file')
    parser.add_argument('config', help='config file (detection, segmentation or classification)')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--out-file', default='demo_result.jpg', help='picture to write')
    parser.add_argument('--font-scale', type=float, default=1.0,
                        help='detection: labels this many times the size MMDetection draws '
                        'them at')
    parser.add_argument('--device', default='cpu', help='e.g. cpu, cuda:0')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection: draw boxes scoring at least this')
    parser.add_argument('--max-per-image', type=int, default=10,
                        help='detection: draw at most this many boxes (the best)')
    parser.add_argument('--upsample', type=int, default=1,
                        help='detection and classification: draw at this multiple of the '
                        'image size (the model still sees the image as the test pipeline '
                        'makes it)')
    parser.add_argument('--opacity', type=float, default=0.5,
                        help='segmentation: opacity of the class colours')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries')
    parser.add_argument('--allow-partial', action='store_true',
                        help='draw even if the checkpoint does not fit the config\'s model')
    args = parser.parse_args(argv)
    if not osp.isfile(args.img):
        raise ValueError(f'image not found: {args.img}')
    if osp.getsize(args.img) == 0:
        raise ValueError(f'image file {args.img} is empty (0 bytes)')
    if mmcv.imread(args.img) is None:
        raise ValueError(f'cannot decode {args.img} ({osp.getsize(args.img)} bytes) as an image '
                         '(OpenCV reads JPEG, PNG, BMP, TIFF, WebP, ...)')
    if args.font_scale <= 0:
        raise ValueError(f'--font-scale must be > 0, got {args.font_scale}')
    if not 0 <= args.score_thr <= 1:
        raise ValueError(f'--score-thr must be in [0, 1], got {args.score_thr}')
    for name in ('max_per_image', 'upsample'):
        if getattr(args, name) < 1:
            raise ValueError(f'--{name.replace("_", "-")} must be >= 1, '
                             f'got {getattr(args, name)}')
    if not 0 <= args.opacity <= 1:
        raise ValueError(f'--opacity must be in [0, 1], got {args.opacity}')
    return args


def check_fit(model, args) -> None:
    """A checkpoint that does not fit the config would draw a partly random model."""
    misfit = checkpoint_misfit(model, args.checkpoint)
    if misfit and not args.allow_partial:
        raise SystemExit(f'error: {misfit}\nNothing was drawn; --allow-partial draws it '
                         'anyway.')


def draw_detections(cfg, args) -> None:
    from mmdet.apis import DetInferencer
    inferencer = DetInferencer(model=cfg, weights=args.checkpoint, device=args.device,
                               show_progress=False)
    check_fit(inferencer.model, args)
    # The inferencer's test pipeline (it loads the image from the path; the config's
    # annotation loading finds none), run here so that the prediction can be pasted larger.
    data = inferencer.pipeline(args.img)
    result = predict_upsampled(inferencer.model, data, args.upsample)
    result.pred_instances = best_predictions(result.pred_instances, args.score_thr,
                                             args.max_per_image)
    visualizer = inferencer.visualizer  # the config's, with the checkpoint's classes
    enlarge_labels(visualizer, args.font_scale)
    image = mmcv.imread(args.img, channel_order='rgb')
    image = mmcv.imrescale(image, args.upsample, interpolation='bicubic')
    visualizer.add_datasample('result', image, data_sample=result, draw_gt=False, show=False,
                              pred_score_thr=0, out_file=args.out_file)
    print(f'{len(result.pred_instances)} detections with score >= {args.score_thr} (at most '
          f'{args.max_per_image}) drawn at {args.upsample}x to {args.out_file}')


def draw_segmentation(cfg, args) -> None:
    from mmseg.apis import MMSegInferencer
    inferencer = MMSegInferencer(model=cfg, weights=args.checkpoint, device=args.device)
    inferencer.show_progress = False  # one image: no progress bar in the tool's output
    check_fit(inferencer.model, args)
    # One image in, one RGB picture out (MMSegInferencer unwraps single-image lists).
    picture = inferencer(args.img, return_vis=True, opacity=args.opacity)['visualization']
    mmcv.imwrite(mmcv.rgb2bgr(picture), args.out_file)
    print(f'segmentation drawn to {args.out_file}')


def draw_classification(cfg, args) -> None:
    from mmpretrain import ImageClassificationInferencer
    from mmpretrain.utils import progress
    from mmpretrain.visualization import UniversalVisualizer
    progress.disable_progress_bar = True  # MMPretrain's switch; one image needs no bar
    inferencer = ImageClassificationInferencer(model=cfg, pretrained=args.checkpoint,
                                               device=args.device)
    check_fit(inferencer.model, args)
    (sample, ) = inferencer(args.img, return_datasamples=True)
    label = int(sample.pred_label[0])
    name = inferencer.classes[label] if inferencer.classes else str(label)
    # What the inferencer's own visualize() draws, into --out-file instead of a folder.
    UniversalVisualizer().visualize_cls(
        mmcv.imread(args.img, channel_order='rgb'), sample, classes=inferencer.classes,
        rescale_factor=args.upsample if args.upsample > 1 else None, out_file=args.out_file)
    print(f'{name} (class {label}, score {float(sample.pred_score[label]):.3f}) drawn at '
          f'{args.upsample}x to {args.out_file}')


DRAW = {'mmdet': draw_detections, 'mmseg': draw_segmentation,
        'mmpretrain': draw_classification}


def main(argv=None):
    args = parse_args(argv)
    cvt_mm.setup_process()
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    out_dir = osp.dirname(osp.abspath(args.out_file))
    os.makedirs(out_dir, exist_ok=True)
    scope = cfg.get('default_scope')
    if scope not in DRAW:
        raise ValueError(f'{args.config}: default_scope {scope!r} is not supported; '
                         "image_demo.py draws 'mmdet' (detection), 'mmseg' (segmentation) and "
                         "'mmpretrain' (classification) configs")
    DRAW[scope](cfg, args)


if __name__ == '__main__':
    main()
