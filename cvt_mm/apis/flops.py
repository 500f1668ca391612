"""Counting the floating-point work of a model run, attention included.

PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts matrix products and
convolutions as they execute (so it follows whatever a forward actually computes, at any input
size, forward and backward), but it has no formula for the fused CPU attention kernel that
``scaled_dot_product_attention`` runs on a CPU: without one, attention (most of CvT's work
at detection sizes, docs/benchmarks.md) would silently count as zero. :func:`count_flops`
adds it.

Conventions: ``flops`` counts a multiply-add as 2 (what GFLOP/s rates use); MMDetection's and
the papers' "FLOPs" are multiply-adds, :attr:`FlopCount.gmacs`. Element-wise operations
(norms, activations, softmax) and mmcv's custom operators (RoIAlign) are not counted, as in
MMEngine's and fvcore's counters.

:func:`get_flops` counts a config's whole model (detector, segmentor or classifier) on one
random image, optionally beside mmcv's module-hook counter (MMDetection 2.x's tool);
``tools/analysis_tools/get_flops.py`` and ``.dev_scripts/flops_table.py`` print it.

Example::

    >>> from cvt_mm.models.cvt import CvT
    >>> model = CvT(arch='13', out_type='logits').eval()
    >>> with torch.no_grad():
    ...     count = count_flops(model, torch.randn(1, 3, 224, 224))
    >>> round(count.gmacs, 2)  # the paper's 4.5G, of which attention 0.7G
    4.57
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Dict

import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    conv_flop_count,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

aten = torch.ops.aten


def _cpu_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward(grad_out_shape, query_shape, key_shape, value_shape, *args,
                            out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _conv_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation,
                   transposed, _output_padding, _groups, output_mask, out_shape=None, **kwargs):
    # The input gradient and the weight gradient each pair every output position with every
    # weight element once: the forward's count each. PyTorch's formula re-derives them as
    # convolutions but drops ``groups``, counting a depth-wise conv's backward 65x too high
    # for CMT's 64-channel maps (CMT-S training would count 15x its forward instead of 3x).
    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


# Formulas PyTorch's counter lacks (the fused CPU attention kernels; it has the CUDA ones)
# or gets wrong (grouped convolutions' backward).
EXTRA_FORMULAS = {
    aten.convolution_backward: _conv_backward,
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
}


@dataclass
class FlopCount:
    """What :func:`count_flops` measured.

    Attributes:
        flops (int): the work, a multiply-add counted as 2.
        by_op (dict[str, int]): the same by aten operator (``'mm'``, ``'convolution'``,
            ``'_scaled_dot_product_flash_attention_for_cpu'``, ...).
    """
    flops: int
    by_op: Dict[str, int] = field(default_factory=dict)

    @property
    def gflops(self) -> float:
        """``flops`` / 1e9, the unit of GFLOP/s rates."""
        return self.flops / 1e9

    @property
    def gmacs(self) -> float:
        """Multiply-adds, the "FLOPs" of MMDetection's tool and of the papers."""
        return self.flops / 2e9

    def attention_share(self) -> float:
        """The fraction of ``flops`` in attention operators (0.0 for no work)."""
        attention = sum(v for k, v in self.by_op.items() if 'attention' in k)
        return attention / self.flops if self.flops else 0.0


class _GlobalOnly:
    """Stands in for ``FlopCounterMode``'s per-module tracker: everything counts as
    ``'Global'``, the only total used here. The tracker hooks the autograd graph of every
    module output until the count ends, which keeps the graphs that recomputing blocks
    (activation checkpointing, CMT's selective recomputation) builds in the backward, and
    all they save, alive through the whole backward."""
    parents = frozenset({'Global'})

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def counter() -> FlopCounterMode:
    """A ``FlopCounterMode`` that also counts the fused CPU attention kernels (totals only,
    not per module)."""
    mode = FlopCounterMode(display=False, custom_mapping=dict(EXTRA_FORMULAS))
    if hasattr(mode, 'mod_tracker'):  # torch >= 2.4
        mode.mod_tracker = _GlobalOnly()
    return mode


def count_flops(fn: Callable, *args, **kwargs) -> FlopCount:
    """Run ``fn(*args, **kwargs)`` once and count its work. Whatever runs inside is counted:
    call ``.backward()`` in ``fn`` to include the backward pass; wrap it in
    ``torch.no_grad()`` for an inference count.

    Args:
        fn (Callable): what to run: a model, or a function that runs one, called with the
            positional and keyword arguments that follow it.

    Returns:
        FlopCount: the work, by operator.

    Example: a training step's work, forward and backward (the module's example counts
    inference)::

        >>> from cvt_mm.models import CMTModel
        >>> model = CMTModel('ti')
        >>> count = count_flops(lambda x: model(x).sum().backward(), torch.randn(2, 3, 160, 160))
        >>> round(count.gflops, 1), round(count.attention_share(), 3)
        (7.7, 0.011)
    """
    with counter() as mode:
        fn(*args, **kwargs)
    by_op = {str(op).replace('aten.', ''): n
             for op, n in mode.get_flop_counts().get('Global', {}).items()}
    return FlopCount(mode.get_total_flops(), by_op)


# ----------------------------------------------------------- whole models of configs
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
        run = lambda: model(inputs, [sample], mode='tensor')  # noqa: E731
        roi_head = getattr(model, 'roi_head', None)
        if type(roi_head).__name__ == 'CascadeRoIHead' and roi_head.with_mask:
            return lambda: _masks_on_100_boxes(roi_head, run)
        return run
    head = getattr(model, 'decode_head', None)
    if task == 'mmseg' and 'batch_data_samples' in inspect.signature(head.forward).parameters:
        # Mask2Former's head reads the padded input shape from the samples (EncoderDecoder's
        # tensor forward passes none).
        from mmseg.structures import SegDataSample
        sample = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                             pad_shape=(h, w), batch_input_shape=(h, w)))
        return lambda: head.forward(model.extract_feat(inputs), [sample])
    return lambda: model(inputs, mode='tensor')


def _masks_on_100_boxes(roi_head, run):
    """``run()`` with Cascade R-CNN's three mask heads on the first 100 of the 1 000 RPN
    proposals. MMDetection's tensor forward runs them on every proposal, where inference runs
    them on at most 100 detections; Mask R-CNN's tensor forward takes 100 (so do we here)."""
    mask_forward = roi_head._mask_forward

    def on_100(stage, x, rois):
        out = mask_forward(stage, x, rois[:100])
        preds = out['mask_preds']  # zeros for the others, which the forward then splits
        out['mask_preds'] = torch.cat([preds, preds.new_zeros((len(rois) - len(preds),
                                                              *preds.shape[1:]))])
        return out

    roi_head._mask_forward = on_100
    try:
        return run()
    finally:
        del roi_head._mask_forward


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
    from .builders import build_model_from_config, load_config, task_of
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
