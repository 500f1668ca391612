"""FLOPs and parameters of any config's model (detector, segmentor or classifier), printed
like MMDetection's ``tools/analysis_tools/get_flops.py``.

    python tools/analysis_tools/get_flops.py configs/mask_rcnn_cmt_s_coco.py --shape 1280 800

"FLOPs" are multiply-adds, as in MMDetection's tool and the CvT/CMT papers. Counted with
:func:`cvt_mm.flops.count_flops` over one inference forward (``mode='tensor'``: backbone,
neck and heads; a two-stage detector's RoI head on its RPN's proposals) of a random image,
so attention is included (MMEngine's counter leaves ``scaled_dot_product_attention`` out).
mmcv's RoIAlign and element-wise operations are not counted, as in MMEngine's counter.
Random weights: the count does not depend on them.

``--shape H W`` is height then width, in MMDetection's order: its (2.x) tool turned
``--shape 1280 800`` into a (1, 3, 1280, 800) tensor, and that is how the papers' detection
FLOPs "at 1280x800" were computed; the default is that input. Width 1280 x height 800 counts
the same to 0.2 % (only CMT's position-bias resize depends on the orientation).

``--mmcv`` also prints the count of mmcv's module-hook counter (``mmcv.cnn.
get_model_complexity_info``), the one MMDetection 2.x's tool used: it counts convolutions,
linear layers, norms and activations by module and misses functional operators, attention's
two matrix products among them. Parameters are the trainable ones, as that counter counts them
(a dense backbone's classification stage is kept for loading but frozen and never run).
"""
import argparse
import sys

import torch

from cvt_mm.flops import count_flops
from cvt_mm.testing import build_model_from_config, load_config, task_of


def tensor_forward(model, task: str, shape, inputs=None):
    """The model's ``mode='tensor'`` forward on one (1, 3, H, W) image: ``inputs``, or a random
    one of ``shape``."""
    h, w = shape
    inputs = torch.randn(1, 3, h, w) if inputs is None else inputs
    if task == 'mmdet':
        from mmdet.structures import DetDataSample
        sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                             pad_shape=(h, w), batch_input_shape=(h, w),
                                             scale_factor=(1.0, 1.0)))
        return lambda: model(inputs, [sample], mode='tensor')
    return lambda: model(inputs, mode='tensor')


class TensorForward(torch.nn.Module):
    """``model``'s tensor forward as a module of one input, which mmcv's counter calls."""

    def __init__(self, model, task: str, shape):
        super().__init__()
        self.model, self.task, self.shape = model, task, tuple(shape)

    def forward(self, x):
        return tensor_forward(self.model, self.task, self.shape, x)()


def mmcv_gmacs(module: torch.nn.Module, shape) -> float:
    """Multiply-adds (G) of ``module(x)`` on one random (1, 3, H, W) image as mmcv's
    module-hook counter counts them (a backbone, or a model's :class:`TensorForward`)."""
    import warnings

    from mmcv.cnn import get_model_complexity_info
    with warnings.catch_warnings():
        # The input comes as a keyword: mmcv warns that it assumes batch size 1, which it is.
        warnings.filterwarnings('ignore', 'No positional inputs found')
        flops, _ = get_model_complexity_info(
            module, (3, *shape), print_per_layer_stat=False, as_strings=False,
            input_constructor=lambda s: dict(x=torch.randn(1, *s)))
    return flops / 1e9


def get_flops(config, shape, mmcv: bool = False) -> dict:
    """FLOPs (multiply-adds) and parameters of a config's model on one random image.

    Args:
        config (str | Config): config file, ``mmdet::...`` path or a loaded Config.
        shape (tuple[int, int]): input (H, W).
        mmcv (bool): also count with mmcv's module-hook counter. Defaults to False.

    Returns:
        dict: ``flops`` and ``backbone_flops`` (G, attention included), ``attention_flops``
        (G), ``params`` (M, trainable), ``attention_share`` of the whole, and with
        ``mmcv=True`` ``mmcv_flops`` (G).

    Example::

        >>> r = get_flops('configs/imagenet_cmt_ti_800e_in1k.py', (160, 160))
        >>> round(r['flops'], 2), round(r['params'], 2)  # the paper's 0.6 G, 9.5 M
        (0.64, 9.49)
    """
    cfg = load_config(config)
    task = task_of(cfg)
    model = build_model_from_config(cfg).eval()
    with torch.no_grad():
        whole = count_flops(tensor_forward(model, task, shape))
        backbone = count_flops(model.backbone, torch.randn(1, 3, *shape))
        result = dict(flops=whole.gmacs, backbone_flops=backbone.gmacs,
                      attention_flops=whole.gmacs * whole.attention_share(),
                      params=sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6,
                      attention_share=whole.attention_share())
        if mmcv:
            result['mmcv_flops'] = mmcv_gmacs(TensorForward(model, task, shape), shape)
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='FLOPs (multiply-adds) and parameters of '
                                     'a config\'s model')
    parser.add_argument('config', help='config file')
    parser.add_argument('--shape', type=int, nargs='+', default=[1280, 800],
                        help='input size: H W, or one number for a square (default 1280 800, '
                        'the input of MMDetection\'s tool and the papers\' detection FLOPs)')
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
    r = get_flops(args.config, args.shape, mmcv=args.mmcv)
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
