"""FLOPs and parameters of any config's model (detector, segmentor or classifier), printed
like MMDetection's ``tools/analysis_tools/get_flops.py``.

    python tools/analysis_tools/get_flops.py configs/mask_rcnn_cmt_s_coco.py --shape 1280 800

"FLOPs" are multiply-adds, as in MMDetection's tool and the CvT/CMT papers. Counted with
:func:`cvt_mm.flops.count_flops` over one inference forward (``mode='tensor'``: backbone,
neck and heads; a two-stage detector's RoI head on its RPN's proposals) of a random image,
so attention is included (MMEngine's counter leaves ``scaled_dot_product_attention`` out).
mmcv's RoIAlign and element-wise operations are not counted, as in MMEngine's counter.
Random weights: the count does not depend on them.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from cvt_mm.flops import count_flops  # noqa: E402
from cvt_mm.testing import build_model_from_config, load_config, task_of  # noqa: E402


def tensor_forward(model, task: str, shape):
    """The model's ``mode='tensor'`` forward on one random (1, 3, H, W) image."""
    h, w = shape
    inputs = torch.randn(1, 3, h, w)
    if task == 'mmdet':
        from mmdet.structures import DetDataSample
        sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                             pad_shape=(h, w), batch_input_shape=(h, w),
                                             scale_factor=(1.0, 1.0)))
        return lambda: model(inputs, [sample], mode='tensor')
    return lambda: model(inputs, mode='tensor')


def get_flops(config, shape) -> dict:
    """``dict(flops, backbone_flops, params, attention_share)``: multiply-adds (G), of the
    whole model and of its backbone alone, parameters (M), and attention's share of the
    whole."""
    cfg = load_config(config)
    task = task_of(cfg)
    model = build_model_from_config(cfg).eval()
    with torch.no_grad():
        whole = count_flops(tensor_forward(model, task, shape))
        backbone = count_flops(model.backbone, torch.randn(1, 3, *shape))
    return dict(flops=whole.gmacs, backbone_flops=backbone.gmacs,
                params=sum(p.numel() for p in model.parameters()) / 1e6,
                attention_share=whole.attention_share())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='FLOPs (multiply-adds) and parameters of '
                                     'a config\'s model')
    parser.add_argument('config', help='config file')
    parser.add_argument('--shape', type=int, nargs='+', default=[1280, 800],
                        help='input size: H W, or one number for a square (default 1280 800, '
                        'MMDetection\'s)')
    args = parser.parse_args(argv)
    if len(args.shape) == 1:
        args.shape = [args.shape[0]] * 2
    if len(args.shape) != 2 or min(args.shape) < 32:
        parser.error(f'--shape takes H W (or one side), each >= 32, got {args.shape}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    r = get_flops(args.config, args.shape)
    split = '=' * 30
    print(f'{split}\nCompute type: direct: randomly generate a picture\n'
          f'Input shape: {tuple(args.shape)}\nFlops: {r["flops"]:.2f} GFLOPs\n'
          f'Params: {r["params"]:.2f} M\nBackbone flops: {r["backbone_flops"]:.2f} GFLOPs '
          f'(attention: {100 * r["attention_share"]:.0f} % of the model)\n{split}\n'
          'FLOPs are multiply-adds (as in MMDetection and the papers); attention is counted, '
          'RoIAlign and element-wise operations are not.')
    return 0


if __name__ == '__main__':
    sys.exit(main())
