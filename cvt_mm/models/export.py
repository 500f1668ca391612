"""A checkpoint of any layout we load, written as a folder that timm, Hugging Face and the Hub
load: ``model.safetensors`` (the model's weights in our layout, the ImageNet head included when
the checkpoint has one), one ``config.json`` for both libraries (transformers' config with the
architecture spelled out and ``auto_map``, timm's ``architecture`` / ``pretrained_cfg`` /
``model_args``), the model's code (``configuration_cvt_mm.py``, ``modeling_cvt_mm.py``:
:mod:`.remote_code`), ``preprocessor_config.json`` (the official evaluation's preprocessing) and a
model card ``README.md``. The command line is ``tools/misc/export_pretrained.py``.

* ``transformers.AutoModelForImageClassification.from_pretrained(OUT_DIR,
  trust_remote_code=True)``, ``AutoModel`` and ``pipeline('image-classification', ...)`` load it
  without cvt_mm; with cvt_mm imported, without ``trust_remote_code`` too;
* ``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` builds the model with the official
  preprocessing in its ``pretrained_cfg``;
* ``init_cfg=dict(type='Pretrained', checkpoint='OUT_DIR/model.safetensors')`` loads it into the
  OpenMMLab backbone.

The checkpoint may be an official file, a Hugging Face ``microsoft/cvt-*`` file, ours, or the
whole model of a run of our configs (MMDetection, MMSegmentation, MMPretrain), whose
``backbone.`` weights are taken (without the OpenMMLab backbone's output norms,
``out_norms.*``, which the timm and Hugging Face models do not have). The arch is recognised
from the weights when it is a row of the family's table; a custom arch is given as ``arch``.
A folder that is not empty is refused unless ``overwrite``.

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
from ..checkpoint.published import published
from .cmt import PRETRAINED_CFGS as CMT_PRETRAINED
from .cmt import CMTModel
from .cvt import PRETRAINED_CFGS as CVT_PRETRAINED
from .cvt import CvTModel
from .remote_code import CONFIG_FILE, MODELING_FILE, auto_map, remote_code_files

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
                      prefix: Optional[str] = None, overwrite: bool = False) -> dict:
    """Write ``src`` (any layout of ``family``; recognised from the keys when None) to
    ``out_dir`` as a Hub folder (see the module doc); returns the config written, with
    ``'sha256'`` of the weights file and the ``'files'`` written.

    Args:
        src (str): the checkpoint, a path or an https:// URL.
        out_dir (str): the folder to write (created; must be empty unless ``overwrite``).
        family (str, optional): ``'cvt'`` or ``'cmt'``. Default: from the keys.
        arch (str | dict, optional): the arch, when the weights are not a row of the table.
        prefix (str, optional): take the keys under this prefix (default: ``module.`` and
            ``backbone.`` are stripped where present).
        overwrite (bool): replace the files of a folder that is not empty. Default False.

    Raises:
        CheckpointError: ``src`` is unreadable, of no known layout, or does not fit ``arch``.
        ValueError: a custom arch without ``arch``, ``out_dir`` an existing file or a folder
            that is not empty (without ``overwrite``).
    """
    _check_out_dir(out_dir, overwrite)
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
    processor = image_processor_config(pretrained_cfg)
    config = hub_config(family, arch, model, model_args, num_classes)
    # The preprocessing goes into config.json too: its timm key (``pretrained_cfg``) makes
    # ``AutoImageProcessor`` take config.json as the image processor's file
    # (``is_timm_local_checkpoint``). transformers <= 5.23 read only the processor's type there
    # and then preprocessor_config.json; 5.25 builds the processor from config.json itself, so
    # without these keys it got ConvNext's defaults (384 x 384).
    config.update(processor)
    config.update({  # timm (local-dir:)
        'architecture': timm_name, 'num_classes': num_classes,
        'num_features': model.num_features, 'model_args': model_args,
        'pretrained_cfg': pretrained_cfg,
    })
    files = {'model.safetensors': weights,
             'config.json': json.dumps(config, indent=2) + '\n',
             'preprocessor_config.json': json.dumps(processor, indent=2) + '\n',
             'README.md': model_card(family, timm_name, arch, config, src)}
    files.update(remote_code_files(family))
    _check_out_dir(out_dir, overwrite)
    os.makedirs(out_dir, exist_ok=True)
    for name, data in files.items():
        write_atomically(data, osp.join(out_dir, name))
    return dict(config, sha256=hashlib.sha256(weights).hexdigest(), layout=layout,
                dropped=out_norms, files=sorted(files))


def _check_out_dir(out_dir: str, overwrite: bool) -> None:
    if osp.isfile(out_dir):
        raise ValueError(f'{out_dir} is a file; export_pretrained writes a folder')
    found = sorted(os.listdir(out_dir)) if osp.isdir(out_dir) else []
    if found and not overwrite:
        raise ValueError(f'{out_dir} is not empty ({", ".join(found[:5])}'
                         f'{", ..." if len(found) > 5 else ""}): give an empty or new folder, '
                         'or --overwrite to replace the files the export writes')


def hub_config(family: str, arch, model, model_args: dict, num_classes: int) -> dict:
    """transformers' part of ``config.json``: the family's config with the architecture spelled
    out, ``auto_map`` to the folder's code, ImageNet's class names for an ImageNet head, every
    stage as the backbone's default outputs."""
    from .huggingface import AUTO_CLASSES
    classes = AUTO_CLASSES[family]
    fields = dict(model_args.get('arch') or MODELS[family].arch_zoo[arch])
    if family == 'cmt':
        fields['pretrain_img_size'] = list(model.pretrain_img_size)
    labels = imagenet_labels() if num_classes == 1000 else None
    config = classes['AutoConfig'](
        **fields, num_channels=model.in_chans, num_labels=max(num_classes, 1),
        **(dict(id2label=dict(enumerate(labels))) if labels else {}),
        out_features=[f'stage{i}' for i in range(1, model.num_stages + 1)])
    head = 'AutoModelForImageClassification' if num_classes else 'AutoModel'
    config.architectures = [classes[head].__name__]
    config.auto_map = auto_map(family)
    out = config.to_dict()
    out.pop('_name_or_path', None)
    return out


def imagenet_labels() -> Optional[list]:
    """ImageNet-1k's class names, as MMPretrain ships them (None without MMPretrain)."""
    try:
        from mmpretrain.datasets.categories import IMAGENET_CATEGORIES
    except ImportError:
        return None
    return [name.split(',')[0].strip() for name in IMAGENET_CATEGORIES]


def image_processor_config(pretrained_cfg: dict) -> dict:
    """The official evaluation's preprocessing as transformers' ``ConvNextImageProcessor``
    (what ``microsoft/cvt-*`` use): below 384 the short side to ``size / crop_pct`` and a
    centre crop of ``size``; from 384 a plain resize to ``size`` x ``size`` (CvT's 384
    evaluation); bicubic; ImageNet's mean and std."""
    size = pretrained_cfg['input_size'][-1]
    return dict(image_processor_type='ConvNextImageProcessor',
                size=dict(shortest_edge=size), crop_pct=pretrained_cfg['crop_pct'],
                resample=3, do_resize=True, do_rescale=True, rescale_factor=1 / 255,
                do_normalize=True, image_mean=list(pretrained_cfg['mean']),
                image_std=list(pretrained_cfg['std']))


PAPERS = {
    'cvt': ('CvT: Introducing Convolutions to Vision Transformers', 'microsoft/CvT',
            '@inproceedings{wu2021cvt,\n  title={CvT: Introducing Convolutions to Vision '
            'Transformers},\n  author={Wu, Haiping and Xiao, Bin and Codella, Noel and Liu, '
            'Mengchen and Dai, Xiyang and Yuan, Lu and Zhang, Lei},\n  booktitle={ICCV},\n'
            '  year={2021}\n}'),
    'cmt': ('CMT: Convolutional Neural Networks Meet Vision Transformers',
            'huawei-noah/Efficient-AI-Backbones',
            '@inproceedings{guo2022cmt,\n  title={CMT: Convolutional Neural Networks Meet '
            'Vision Transformers},\n  author={Guo, Jianyuan and Han, Kai and Wu, Han and Tang, '
            'Yehui and Chen, Xinghao and Wang, Yunhe and Xu, Chang},\n  booktitle={CVPR},\n'
            '  year={2022}\n}'),
}


def model_card(family: str, timm_name: str, arch, config: dict, src: str) -> str:
    """The folder's ``README.md``: the Hub's metadata block, what the model is, its variant's
    published ImageNet top-1, how to load it, the citation."""
    row = next((p for p in published(family) if p.arch == arch), None) \
        if isinstance(arch, str) else None
    title, repo, bibtex = PAPERS[family]
    name = f'{family.upper() if family == "cmt" else "CvT"}-{arch}' if isinstance(arch, str) \
        else f'{family} (custom arch)'
    datasets = ['imagenet-1k'] + (['imagenet-21k'] if row and row.pretrain == 'IN-22k' else [])
    licence = row.licence.lower() if row else 'other'
    top1 = (f'The published {row.name} checkpoint of this variant reports **{row.top1} %** '
            f'ImageNet-1k top-1 at {row.input_size}x{row.input_size} ({row.pretrain} '
            f'pre-training; [{repo}](https://github.com/{repo})).') if row else \
        'A custom architecture: no published accuracy.'
    head = config['architectures'][0]
    return '\n'.join([
        '---', f'license: {licence}', 'library_name: transformers',
        'tags: [image-classification, vision, cvt_mm, timm, custom_code]',
        f'datasets: [{", ".join(datasets)}]', 'pipeline_tag: image-classification', '---', '',
        f'# {name}', '',
        f'{title}: the model as cvt_mm computes it '
        f'(the official forward), written from `{osp.basename(str(src))}` by '
        '`tools/misc/export_pretrained.py`. The code is in this folder '
        f'(`{CONFIG_FILE}`, `{MODELING_FILE}`); transformers loads it with '
        '`trust_remote_code=True`, timm with cvt_mm installed.', '', top1, '',
        '```python', 'from transformers import AutoModelForImageClassification, pipeline', '',
        'classifier = pipeline("image-classification", model="THIS_FOLDER", '
        'trust_remote_code=True)',
        f'# {head}; AutoModel and AutoBackbone\'s class (in {MODELING_FILE}) load it too', '```',
        '', '```python', 'import cvt_mm, timm', '',
        'model = timm.create_model("local-dir:THIS_FOLDER", pretrained=True)', '```', '',
        '## Citation', '', '```bibtex', bibtex, '```', ''])


def main(argv=None, description: str = __doc__) -> int:
    """The command line of ``tools/misc/export_pretrained.py``: exit status 0, or 1 with the
    error on stderr."""
    parser = argparse.ArgumentParser(description=description.split('\n\n')[0])
    parser.add_argument('checkpoint', help='any CvT/CMT checkpoint we load (path or URL)')
    parser.add_argument('out_dir', help='the folder to write (new or empty)')
    parser.add_argument('--family', choices=sorted(MODELS),
                        help='backbone family (default: recognised from the keys)')
    parser.add_argument('--arch', default=None,
                        help='the arch: a row name or a JSON dict (default: from the weights)')
    parser.add_argument('--prefix', default=None,
                        help='take the keys under this prefix (default: module. and backbone. '
                        'are stripped where present)')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace the files of a folder that is not empty')
    args = parser.parse_args(argv)
    arch = args.arch
    if arch and arch.lstrip().startswith('{'):
        try:
            arch = json.loads(arch)
        except json.JSONDecodeError as err:
            parser.error(f'--arch is not valid JSON: {err}')
    try:
        written = export_pretrained(args.checkpoint, args.out_dir, args.family, arch,
                                    args.prefix, overwrite=args.overwrite)
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
