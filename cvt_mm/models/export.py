"""A checkpoint of any layout we load, written as a folder that timm and Hugging Face load:
``model.safetensors`` (the model's weights in our layout, the ImageNet head included when the
checkpoint has one) and one ``config.json`` that both read, timm's keys (``architecture``,
``pretrained_cfg``, ``model_args``) beside transformers' (``model_type``, ``arch``,
``out_features``). The command line is ``tools/misc/export_pretrained.py``.

* ``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` builds the model with the official
  preprocessing in its ``pretrained_cfg``;
* ``transformers.AutoModel.from_pretrained(OUT_DIR)`` (or ``CvTBackbone.from_pretrained``)
  builds the Hugging Face backbone, every stage in ``out_features``;
* ``init_cfg=dict(type='Pretrained', checkpoint='OUT_DIR/model.safetensors')`` loads it into the
  OpenMMLab backbone.

The checkpoint may be an official file, a Hugging Face ``microsoft/cvt-*`` file, ours, or the
whole model of a run of our configs (MMDetection, MMSegmentation, MMPretrain), whose
``backbone.`` weights are taken (without the OpenMMLab backbone's output norms,
``out_norms.*``, which the timm and Hugging Face models do not have). The arch is recognised
from the weights when it is a row of the family's table; a custom arch is given as ``arch``.

Example::

    >>> export_pretrained('checkpoints/cmt_small.pth', 'exported/cmt_s')['architecture']
    'cmt_s'
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import os.path as osp
import sys
from typing import Optional, Union

from ..checkpoint.formats import convert_state_dict, extract_state_dict, format_family
from ..checkpoint.io import CheckpointError, write_atomically
from ..checkpoint.loading import arch_of, fit_state_dict, read_checkpoint
from .cmt import PRETRAINED_CFGS as CMT_PRETRAINED
from .cmt import CMTModel
from .cvt import PRETRAINED_CFGS as CVT_PRETRAINED
from .cvt import CvTModel

__all__ = ['export_pretrained', 'main']

MODELS = {'cvt': CvTModel, 'cmt': CMTModel}
# The timm names of the arch table's rows.
TIMM_NAMES = {'cvt': {'13': 'cvt_13', '21': 'cvt_21', 'w24': 'cvt_w24'},
              'cmt': {'ti': 'cmt_ti', 'xs': 'cmt_xs', 's': 'cmt_s', 'b': 'cmt_b'}}
PRETRAINED = {'cvt': CVT_PRETRAINED, 'cmt': CMT_PRETRAINED}
HF_MODEL_TYPES = {'cvt': 'cvt_mm_cvt', 'cmt': 'cvt_mm_cmt'}


def _zoo_arch(sd: dict, family: str) -> Optional[str]:
    """The arch table's row the weights are (depths and widths; CMT's heads too), or None."""
    model_cls = MODELS[family]
    label = arch_of(sd, model_cls.arch_zoo, family)
    for name in model_cls.arch_zoo:
        if label.lower() == f'{family}-{name}'.lower():
            return name
    return None


def _pretrain_img_size(sd: dict, arch) -> Optional[list]:
    """CMT: the square training resolution its stage-0 bias was stored for, where it is not
    the arch's own (the bias's query grid is a quarter of the image side)."""
    bias = sd.get('stages.0.relative_pos')
    if bias is None:
        return None
    side = int(round(bias.shape[1] ** 0.5)) * 4
    default = (CMTModel.arch_zoo[arch]['pretrain_img_size'] if isinstance(arch, str)
               else arch.get('pretrain_img_size', 224))
    return None if side == default else [side, side]


def export_pretrained(src: str, out_dir: str, family: Optional[str] = None,
                      arch: Optional[Union[str, dict]] = None,
                      prefix: Optional[str] = None) -> dict:
    """Write ``src`` (any layout of ``family``; recognised from the keys when None) to
    ``out_dir`` as ``model.safetensors`` + ``config.json`` (see the module doc); returns the
    config written, with ``'sha256'`` of the weights file.

    Args:
        src (str): the checkpoint, a path or an https:// URL.
        out_dir (str): the folder to write (created; the two files in it are replaced).
        family (str, optional): ``'cvt'`` or ``'cmt'``. Default: from the keys.
        arch (str | dict, optional): the arch, when the weights are not a row of the table.
        prefix (str, optional): take the keys under this prefix (default: ``module.`` and
            ``backbone.`` are stripped where present).

    Raises:
        CheckpointError: ``src`` is unreadable, of no known layout, or does not fit ``arch``.
        ValueError: a custom arch without ``arch``, or ``out_dir`` an existing file.
    """
    if osp.isfile(out_dir):
        raise ValueError(f'{out_dir} is a file; export_pretrained writes a folder')
    sd, _ = extract_state_dict(read_checkpoint(src, family), prefix)
    sd, layout = convert_state_dict(sd, family)
    family = format_family(layout)
    # The OpenMMLab backbone's optional output norms belong to it (and its dense head), not to
    # the model timm and transformers build.
    out_norms = sorted(k for k in sd if k.startswith('out_norms.'))
    sd = {k: v for k, v in sd.items() if k not in out_norms}
    model_cls = MODELS[family]
    name = _zoo_arch(sd, family)
    if arch is None and name is None:
        raise ValueError(
            f'{src}: the weights are {arch_of(sd, model_cls.arch_zoo, family)}, not a row of '
            f'the {family} table ({", ".join(model_cls.arch_zoo)}): give the arch (a dict as '
            f'{model_cls.__name__} takes it, e.g. --arch \'{{"embed_dims": [...], '
            '"num_heads": [...], "depths": [...]}\')')
    arch = name if arch is None else arch
    head = sd.get('head.weight')
    num_classes = int(head.shape[0]) if head is not None else 0
    model_args = dict(arch=arch) if isinstance(arch, dict) else {}
    if family == 'cmt':
        size = _pretrain_img_size(sd, arch)
        if size:
            model_args['pretrain_img_size'] = size
    in_chans = int(sd[f'{model_cls.first_conv}.weight'].shape[1])
    model = model_cls(arch, in_chans=in_chans, num_classes=num_classes,
                      **{k: v for k, v in model_args.items() if k != 'arch'})
    # The loaders' own check: anything missing, left over or of another shape is an error.
    sd = fit_state_dict(model, sd, family, src, layout,
                        partial_hint=' (for a custom arch, give it as --arch)')
    model.load_state_dict(sd, strict=False)

    from safetensors.torch import save
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    weights = save(tensors, metadata={'format': 'pt', 'source_layout': layout})
    timm_name = TIMM_NAMES[family].get(arch) if isinstance(arch, str) else None
    timm_name = timm_name or TIMM_NAMES[family][next(iter(model_cls.arch_zoo))]
    pretrained_cfg = dict(next(cfg for tag, cfg in PRETRAINED[family].items()
                               if tag.split('.')[0] == timm_name))
    pretrained_cfg.update(num_classes=num_classes, url='')
    pretrained_cfg.pop('hf_hub_id', None)  # the folder is the source
    if model_args.get('pretrain_img_size'):
        pretrained_cfg['input_size'] = (3, *model_args['pretrain_img_size'])
    stages = [f'stage{i}' for i in range(1, model_cls.num_stages + 1)]
    config = {
        # transformers (cvt_mm.models.huggingface)
        'model_type': HF_MODEL_TYPES[family],
        'architectures': [{'cvt': 'CvTBackbone', 'cmt': 'CMTBackbone'}[family]],
        'arch': arch, 'num_channels': model.in_chans,
        'model_kwargs': {k: v for k, v in model_args.items() if k != 'arch'},
        'out_features': stages, 'out_indices': list(range(len(stages))),
        # timm (local-dir:)
        'architecture': timm_name, 'num_classes': num_classes,
        'num_features': model.num_features, 'model_args': model_args,
        'pretrained_cfg': pretrained_cfg,
    }
    os.makedirs(out_dir, exist_ok=True)
    write_atomically(weights, osp.join(out_dir, 'model.safetensors'))
    write_atomically(json.dumps(config, indent=2) + '\n', osp.join(out_dir, 'config.json'))
    return dict(config, sha256=hashlib.sha256(weights).hexdigest(), layout=layout,
                dropped=out_norms)


def main(argv=None, description: str = __doc__) -> int:
    """The command line of ``tools/misc/export_pretrained.py``: exit status 0, or 1 with the
    error on stderr."""
    parser = argparse.ArgumentParser(description=description.split('\n\n')[0])
    parser.add_argument('checkpoint', help='any CvT/CMT checkpoint we load (path or URL)')
    parser.add_argument('out_dir', help='folder for model.safetensors and config.json')
    parser.add_argument('--family', choices=sorted(MODELS),
                        help='backbone family (default: recognised from the keys)')
    parser.add_argument('--arch', default=None,
                        help='the arch: a row name or a JSON dict (default: from the weights)')
    parser.add_argument('--prefix', default=None,
                        help='take the keys under this prefix (default: module. and backbone. '
                        'are stripped where present)')
    args = parser.parse_args(argv)
    arch = args.arch
    if arch and arch.lstrip().startswith('{'):
        try:
            arch = json.loads(arch)
        except json.JSONDecodeError as err:
            parser.error(f'--arch is not valid JSON: {err}')
    try:
        written = export_pretrained(args.checkpoint, args.out_dir, args.family, arch,
                                    args.prefix)
    except (CheckpointError, ValueError) as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    if written['dropped']:
        print(f'dropped {len(written["dropped"])} tensors of the OpenMMLab backbone\'s output '
              'norms (out_norms.*), which the timm and Hugging Face models do not have')
    print(f'{args.checkpoint} ({written["layout"]}) -> {args.out_dir}: model.safetensors '
          f'(sha256 {written["sha256"]}), config.json (timm: local-dir:{args.out_dir}, '
          f'{written["architecture"]}; transformers: {written["architectures"][0]})')
    return 0
