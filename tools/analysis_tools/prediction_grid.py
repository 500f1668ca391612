"""One picture of a detector's predictions beside the ground truth on its test set.

    python tools/analysis_tools/prediction_grid.py CONFIG CHECKPOINT --out grid.jpg

Each cell pairs an image's ground truth (left) with the prediction (right); cells fill a grid
``--columns`` wide. Small images are drawn ``--upsample`` times larger so that labels can be
read: the model still sees exactly what evaluation feeds it (the config's test pipeline on the
original file), and only its output is pasted at the larger size (boxes scaled, masks pasted
from the mask head at full resolution, not blown-up pixels). Predictions below ``--score-thr``
and beyond the ``--max-per-image`` best are left out. Detection configs
(``default_scope='mmdet'``) only.
"""
import argparse
import os
import os.path as osp

import cv2
import mmcv
import numpy as np
from mmengine.config import Config, DictAction

import cvt_mm  # registers CvT/CMT; main() calls cvt_mm.setup_process()
from cvt_mm.apis.visualization import best_predictions, enlarge_labels, predict_upsampled
from cvt_mm.checkpoint import checkpoint_misfit


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='detection config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--out', default='prediction_grid.jpg', help='picture to write')
    parser.add_argument('--num-images', type=int, default=8,
                        help='the first N images of the test set')
    parser.add_argument('--columns', type=int, default=2, help='cells (GT + prediction) per row')
    parser.add_argument('--upsample', type=int, default=3,
                        help='draw at this multiple of the image size')
    parser.add_argument('--score-thr', type=float, default=0.5,
                        help='draw predictions scoring at least this')
    parser.add_argument('--max-per-image', type=int, default=5,
                        help='draw at most this many predictions per image (the best)')
    parser.add_argument('--font-scale', type=float, default=2.0,
                        help='labels this many times the size MMDetection draws them at')
    parser.add_argument('--device', default='cpu', help='e.g. cpu, cuda:0')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries')
    args = parser.parse_args(argv)
    for name in ('num_images', 'columns', 'upsample', 'max_per_image'):
        if getattr(args, name) < 1:
            raise ValueError(f'--{name.replace("_", "-")} must be >= 1, '
                             f'got {getattr(args, name)}')
    if args.font_scale <= 0:
        raise ValueError(f'--font-scale must be > 0, got {args.font_scale}')
    if not 0 <= args.score_thr <= 1:
        raise ValueError(f'--score-thr must be in [0, 1], got {args.score_thr}')
    return args


def upsampled_ground_truth(result, factor: int):
    """The test pipeline's annotations (original size) scaled to the drawing size."""
    gt = result.gt_instances.clone()
    gt.bboxes = gt.bboxes * factor
    if 'masks' in gt:
        height, width = result.ori_shape  # already the upsampled shape
        gt.masks = gt.masks.resize((height, width))
    return gt


def tile(cells: list, columns: int, gap: int = 8, header: int = 40) -> np.ndarray:
    """Cells (ground truth | prediction, side by side) in rows of ``columns``, white gaps
    between, under a ``header`` px strip that names the two halves of each column."""
    height = max(cell.shape[0] for cell in cells)
    width = max(cell.shape[1] for cell in cells)
    rows = (len(cells) + columns - 1) // columns
    grid = np.full((header + rows * (height + gap) - gap, columns * (width + gap) - gap, 3), 255,
                   np.uint8)
    for column in range(columns):
        for half, title in enumerate(('ground truth', 'prediction')):
            left = column * (width + gap) + half * width // 2 + 8
            cv2.putText(grid, title, (left, header - 12), cv2.FONT_HERSHEY_SIMPLEX, 0.9,
                        (0, 0, 0), 2, cv2.LINE_AA)
    for index, cell in enumerate(cells):
        top = header + (index // columns) * (height + gap)
        left = (index % columns) * (width + gap)
        grid[top:top + cell.shape[0], left:left + cell.shape[1]] = cell
    return grid


def main(argv=None):
    args = parse_args(argv)
    cvt_mm.setup_process()
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if cfg.get('default_scope') != 'mmdet':
        raise ValueError(f'{args.config}: prediction_grid draws detection configs '
                         f"(default_scope='mmdet'), got default_scope="
                         f"{cfg.get('default_scope')!r}")
    if not any(t['type'] == 'LoadAnnotations' for t in cfg.test_dataloader.dataset.pipeline):
        raise ValueError(f'{args.config}: the test pipeline loads no annotations, so there is '
                         'no ground truth to draw beside the predictions')
    from mmdet.apis import init_detector
    from mmdet.registry import DATASETS, VISUALIZERS
    from mmengine.registry import init_default_scope

    init_default_scope('mmdet')
    model = init_detector(cfg, args.checkpoint, device=args.device)
    misfit = checkpoint_misfit(model, args.checkpoint)
    if misfit:
        raise SystemExit(f'error: {misfit}\nNothing was drawn.')
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    visualizer = VISUALIZERS.build(cfg.visualizer)
    visualizer.dataset_meta = dataset.metainfo
    enlarge_labels(visualizer, args.font_scale)
    cells, drawn = [], 0
    for index in range(min(args.num_images, len(dataset))):
        data = dataset[index]
        result = predict_upsampled(model, data, args.upsample)
        result.pred_instances = best_predictions(result.pred_instances, args.score_thr,
                                                 args.max_per_image)
        result.gt_instances = upsampled_ground_truth(result, args.upsample)
        drawn += len(result.pred_instances)
        image = mmcv.imread(result.img_path, channel_order='rgb')
        image = mmcv.imrescale(image, args.upsample, interpolation='bicubic')
        visualizer.add_datasample(osp.basename(result.img_path), image, data_sample=result,
                                  draw_gt=True, draw_pred=True, pred_score_thr=0)
        cells.append(visualizer.get_image())
    if not cells:
        raise ValueError(f'{args.config}: the test set is empty')
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    mmcv.imwrite(mmcv.rgb2bgr(tile(cells, args.columns)), args.out)
    print(f'{len(cells)} images (ground truth | prediction), {drawn} predictions with score >= '
          f'{args.score_thr} (at most {args.max_per_image} each) drawn to {args.out}')


if __name__ == '__main__':
    main()
