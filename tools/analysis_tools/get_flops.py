"""FLOPs and parameters of any config's model (detector, segmentor or classifier), printed
like MMDetection's ``tools/analysis_tools/get_flops.py``.

    python tools/analysis_tools/get_flops.py configs/mask_rcnn_cmt_s_coco.py --shape 1280 800

"FLOPs" are multiply-adds, as in MMDetection's tool and the CvT/CMT papers. Counted with
:func:`cvt_mm.apis.flops.count_flops` over one inference forward (``mode='tensor'``: backbone,
neck and heads; a two-stage detector's RoI head on its RPN's proposals) of a random image,
so attention is included (MMEngine's counter leaves ``scaled_dot_product_attention`` out).
mmcv's RoIAlign and element-wise operations are not counted, as in MMEngine's counter.
Random weights: the count does not depend on them.

``--shape H W`` is height then width, in MMDetection's order: its (2.x) tool turned
``--shape 1280 800`` into a (1, 3, 1280, 800) tensor, and that is how the papers' detection
FLOPs "at 1280x800" were computed; the default is that input. Width 1280 x height 800 counts
the same to 0.2 % (only CMT's position-bias resize depends on the orientation).

``--cfg-options`` changes the config before the model is built, as in MMDetection's tools:
docs/detection_segmentation.md counts the variants it compares with the shipped configs so.

``--mmcv`` also prints the count of mmcv's module-hook counter (``mmcv.cnn.
get_model_complexity_info``), the one MMDetection 2.x's tool used: it counts convolutions,
linear layers, norms and activations by module and misses functional operators, attention's
two matrix products among them. Parameters are the trainable ones, as that counter counts them
(a dense backbone's classification stage is kept for loading but frozen and never run).
"""
import argparse
import sys

from mmengine.config import DictAction

from cvt_mm.apis.builders import load_config
from cvt_mm.apis.flops import get_flops


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='FLOPs (multiply-adds) and parameters of '
                                     'a config\'s model')
    parser.add_argument('config', help='config file')
    parser.add_argument('--shape', type=int, nargs='+', default=[1280, 800],
                        help='input size: H W, or one number for a square (default 1280 800, '
                        'the input of MMDetection\'s tool and the papers\' detection FLOPs)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries before the model is built, e.g. '
                        'model.backbone.out_indices=[0,1,2] (a variant not shipped)')
    parser.add_argument('--mmcv', action='store_true',
                        help='also count with mmcv\'s module-hook counter (MMDetection 2.x\'s '
                        'get_flops; no attention matrix products)')
    args = parser.parse_args(argv)
    if len(args.shape) == 1:
        args.shape = [args.shape[0]] * 2
    if len(args.shape) != 2 or min(args.shape) < 32:
        parser.error(f'--shape takes H W (or one side), each >= 32, got {args.shape}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    r = get_flops(cfg, args.shape, mmcv=args.mmcv)
    split = '=' * 30
    mmcv_line = (f'Flops, mmcv counter: {r["mmcv_flops"]:.2f} GFLOPs\n' if args.mmcv else '')
    print(f'{split}\nCompute type: direct: randomly generate a picture\n'
          f'Input shape: {tuple(args.shape)}\nFlops: {r["flops"]:.2f} GFLOPs\n'
          f'Params: {r["params"]:.2f} M\nBackbone flops: {r["backbone_flops"]:.2f} GFLOPs '
          f'(attention: {100 * r["attention_share"]:.0f} % of the model)\n{mmcv_line}{split}\n'
          'FLOPs are multiply-adds (as in MMDetection and the papers); attention is counted, '
          'RoIAlign and element-wise operations are not. Params: trainable.')
    return 0


if __name__ == '__main__':
    sys.exit(main())
