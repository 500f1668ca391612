"""The peers that ``benchmark.py backbone`` times beside ours, each a classifier returning
``(logits,)`` as our ``out_type='logits'`` backbones do, with random weights, at the arch of
our ``--model``:

* Hugging Face's CvT (``--vs-hf``, path ``hf``): :class:`HFCvtLogits`, needs transformers.
* Our own models through timm and Hugging Face (``--entry-points``, paths ``timm``,
  ``hf-backbone`` and ``hub-code``): :class:`EntryPoint`, ``timm.create_model``
  (``features_only`` for a feature-map ``--model``), transformers' ``AutoModel`` on our
  backbone config, and the code of a Hub folder that ``tools/misc/export_pretrained.py``
  writes (its classifier or backbone class, loaded from the folder by transformers' dynamic
  modules, as ``trust_remote_code`` loads it where cvt_mm is not installed): the same modules
  as ours by another door, which must cost the same.
* The official code (``--official PATH``, path ``official``): :class:`OfficialLogits`, built
  by running, unmodified, the model file of a local checkout (nothing is downloaded):

  - microsoft/CvT (``lib/models/cls_cvt.py``, ``get_cls_model``) with the spec of its
    ImageNet config (``experiments/imagenet/cvt/cvt-13-224x224.yaml`` and so on: kernels,
    strides, paddings, cls token) and the dims, heads and depths of our arch;
  - huawei-noah/Efficient-AI-Backbones (``cmt_pytorch/cmt.py``): ``cmt_ti`` ... ``cmt_b``
    for our named archs, its ``CMT`` class for an arch dict, built at the input size (its
    relative position biases fix the one size it runs at: square inputs only).

  Both import timm (``pip install -e .[peers]``); microsoft/CvT's file imports
  ``torch._six``, gone from PyTorch 2, which :func:`load_official_module` provides
  (``container_abcs``, all the file takes from it) before running it.

The configs here (``dict(type='HFCvtLogits', ...)``, ``dict(type='OfficialLogits', ...)``)
travel to a case's process as JSON; :func:`peer_config` makes them from ours and checks that
the peer can do the same work, :func:`build_peer` builds them there.
"""
from __future__ import annotations

import collections.abc
import importlib.util
import os.path as osp
import sys
import types
import warnings
from typing import Optional, Sequence

import torch

__all__ = ['HFCvtLogits', 'hf_peer_config', 'EntryPoint', 'entry_point_config',
           'OfficialLogits', 'official_family', 'official_peer_config', 'load_official_module',
           'build_official', 'peer_config', 'build_peer', 'PEER_PATHS', 'PEER_NAMES',
           'ENTRY_POINTS']

# The attention paths of the peers in the tool's table, and how the table names them.
ENTRY_POINTS = ('timm', 'hf-backbone', 'hub-code')
PEER_PATHS = ('hf', 'official') + ENTRY_POINTS
PEER_NAMES = {'hf': 'Hugging Face', 'official': 'official', 'timm': 'timm',
              'hf-backbone': 'Hugging Face backbone', 'hub-code': "Hub folder's code"}

# What identifies a checkout, and the file whose model is run.
OFFICIAL_FILES = {'cvt': 'lib/models/cls_cvt.py', 'cmt': 'cmt_pytorch/cmt.py'}
OFFICIAL_REPOS = {'cvt': 'https://github.com/microsoft/CvT',
                  'cmt': 'https://github.com/huawei-noah/Efficient-AI-Backbones'}
# microsoft/CvT's ImageNet configs per named arch; an arch dict takes CvT-13's spec (the
# three configs differ only in dims, heads, depths and drop-path rates).
CVT_YAMLS = {'13': 'cvt-13-224x224.yaml', '21': 'cvt-21-224x224.yaml',
             'w24': 'cvt-w24-384x384.yaml'}


# ------------------------------------------------------------------------- Hugging Face
class HFCvtLogits(torch.nn.Module):
    """Hugging Face's ``CvtForImageClassification`` (``transformers``) at the sizes of a CvT
    ``arch`` (a row of ``CvT.arch_zoo`` by name, or a dict), random weights, returning
    ``(logits,)`` as ``CvT(out_type='logits')`` does: the peer that ``benchmark.py backbone
    --vs-hf`` times beside ours. Hugging Face's CvT is the official architecture with exact
    GELU (the official weights use QuickGELU), so the work is the same.

    Example::

        >>> logits, = HFCvtLogits('13', num_classes=1000)(torch.randn(2, 3, 224, 224))
    """

    def __init__(self, arch='13', num_classes: int = 1000):
        super().__init__()
        try:
            from transformers import CvtConfig, CvtForImageClassification
        except ImportError as err:
            raise ImportError('--vs-hf times Hugging Face\'s CvT, which needs transformers: '
                              'pip install -e .[peers]') from err
        from cvt_mm.models._helpers import resolve_arch
        from cvt_mm.models.cvt import CvT
        row = resolve_arch(arch, CvT.arch_zoo, 3)
        # transformers 5 indexes a stage's drop-path rates by the stage's index.
        if any(depth <= i for i, depth in enumerate(row['depths'])):
            raise ValueError("Hugging Face's CvT needs more than i blocks in stage i, got "
                             f"depths={list(row['depths'])}")
        self.in_channels = 3
        self.model = CvtForImageClassification(CvtConfig(
            embed_dim=list(row['embed_dims']), num_heads=list(row['num_heads']),
            depth=list(row['depths']), num_labels=num_classes))

    def forward(self, x: torch.Tensor) -> tuple:
        return (self.model(pixel_values=x).logits, )


def hf_peer_config(model_cfg: dict) -> dict:
    """The ``--model`` of Hugging Face's CvT with the arch and classes of our CvT
    ``model_cfg``; ``ValueError`` for another family (Hugging Face has no CMT)."""
    if model_cfg.get('type') != 'CvT':
        raise ValueError(f"--vs-hf compares with Hugging Face's CvT, so --model must be a "
                         f"CvT, got type={model_cfg.get('type')!r}")
    _check_logits(model_cfg, '--vs-hf', "Hugging Face's")
    return dict(type='HFCvtLogits', arch=model_cfg.get('arch', '13'),
                num_classes=model_cfg.get('num_classes', 1000))


def _check_logits(model_cfg: dict, option: str, whose: str) -> None:
    if model_cfg.get('out_type') != 'logits':
        raise ValueError(f"{option} times {whose} classifier: give --model "
                         "out_type='logits' so that both do the same work")


# ------------------------------------------------------------------------- entry points
class EntryPoint(torch.nn.Module):
    """Our model of ``cfg`` built through timm, transformers or a Hub folder's code,
    returning a tuple as our backbones do: the maps of ``out_indices`` (stage order), or
    ``(logits, )`` (timm and the Hub folder's classifier).

    Example::

        >>> maps = EntryPoint(dict(via='timm', name='cmt_s', out_indices=[0, 1, 2, 3]))(x)
    """

    def __init__(self, cfg: dict):
        super().__init__()
        self.via, self.in_channels = cfg['via'], 3
        family, arch = cfg['name'].split('_', 1)
        if self.via == 'timm':
            import timm
            kwargs = dict(num_classes=cfg['num_classes']) if cfg['logits'] else dict(
                features_only=True, out_indices=cfg['out_indices'])
            self.model = timm.create_model(cfg['name'], fast_paths=cfg['fast_paths'],
                                           **cfg['model_kwargs'], **kwargs)
        elif self.via == 'hub-code':
            self.logits = cfg['logits']
            self.model = hub_code_model(cfg)
            self.model.set_fast_paths(cfg['fast_paths'])
        else:
            from transformers import AutoBackbone

            from cvt_mm.models.huggingface import AUTO_CLASSES
            config = AUTO_CLASSES[family]['AutoConfig'](
                arch=cfg['arch'], model_kwargs=cfg['model_kwargs'],
                out_indices=[i + 1 for i in cfg['out_indices']])  # stage_names[0] is the stem
            self.model = AutoBackbone.from_config(config)
            self.model.set_fast_paths(cfg['fast_paths'])

    def forward(self, x: torch.Tensor) -> tuple:
        if self.via == 'timm':
            out = self.model(x)
            return tuple(out) if isinstance(out, list) else (out, )
        if self.via == 'hub-code' and self.logits:
            return (self.model(pixel_values=x).logits, )
        return tuple(self.model(x).feature_maps)


def hub_code_model(cfg: dict) -> torch.nn.Module:
    """The model of an :class:`EntryPoint` config as a Hub folder's code runs it: random
    weights written to a temporary folder by :func:`cvt_mm.models.export.export_pretrained`
    (what ``tools/misc/export_pretrained.py`` does), then the folder's classifier (logits) or
    backbone class (maps) loaded from its ``modeling_cvt_mm.py`` by transformers' dynamic
    modules, not from cvt_mm."""
    import tempfile

    import timm
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from cvt_mm.models.export import export_pretrained
    from cvt_mm.models.huggingface import AUTO_CLASSES
    family = cfg['name'].split('_', 1)[0]
    auto = 'AutoModelForImageClassification' if cfg['logits'] else 'AutoBackbone'
    maps = {} if cfg['logits'] else dict(out_indices=[i + 1 for i in cfg['out_indices']])
    # The folder goes when the weights are loaded: transformers keeps its own copy of the code.
    with tempfile.TemporaryDirectory(prefix='cvt_mm_hub_code_') as folder:
        checkpoint, hub = osp.join(folder, 'random.pth'), osp.join(folder, 'hub')
        torch.save(timm.create_model(cfg['name'], num_classes=cfg['num_classes'],
                                     **cfg['model_kwargs']).state_dict(), checkpoint)
        export_pretrained(checkpoint, hub)
        cls = get_class_from_dynamic_module(
            f'modeling_cvt_mm.{AUTO_CLASSES[family][auto].__name__}', hub)
        if not cls.__module__.startswith('transformers_modules'):
            raise RuntimeError(f'{cls} came from {cls.__module__}, not the folder\'s code')
        # The config spells the architecture out: the model's keyword arguments are its fields.
        fields = cls.config_class.from_pretrained(hub).to_dict()
        unknown = sorted(set(cfg['model_kwargs']) - set(fields))
        if unknown:
            raise ValueError(f'hub-code: the Hub config has no field {unknown}; fields: '
                             f'{sorted(fields)}')
        return cls.from_pretrained(hub, **cfg['model_kwargs'], **maps)


def entry_point_config(path: str, model_cfg: dict, fast_paths: bool = True) -> dict:
    """The config of our ``model_cfg`` (a CvT or CMT with a named arch, without output norms:
    timm and transformers build neither) through ``path`` (``'timm'``, ``'hf-backbone'``,
    ``'hub-code'``)."""
    from cvt_mm.models.export import TIMM_NAMES
    family = str(model_cfg.get('type')).lower()
    arch = model_cfg.get('arch', {'cvt': '13', 'cmt': 's'}.get(family))
    if family not in TIMM_NAMES or not isinstance(arch, str):
        raise ValueError(f'--entry-points builds our model through timm and transformers by '
                         f'name, so --model must be a CvT or CMT with a named arch, got '
                         f'{model_cfg!r}')
    if model_cfg.get('out_norm_cfg'):
        raise ValueError('--entry-points: timm and transformers build no output norms; give '
                         '--model without out_norm_cfg, so that all do the same work')
    logits = model_cfg.get('out_type') == 'logits'
    if logits and path == 'hf-backbone':
        raise ValueError("--entry-points: a transformers backbone returns maps, not logits; "
                         "give --model with out_type='featmap' (the default)")
    num_stages = 3 if family == 'cvt' else 4
    model_kwargs = {k: model_cfg[k] for k in ('drop_path_rate', 'pretrain_img_size',
                                              'selective_cp') if k in model_cfg}
    return dict(type='EntryPoint', via=path, name=TIMM_NAMES[family][arch], arch=arch,
                logits=logits, num_classes=model_cfg.get('num_classes', 1000),
                out_indices=sorted(model_cfg.get('out_indices', range(num_stages))),
                model_kwargs=model_kwargs, fast_paths=fast_paths)


# ------------------------------------------------------------------------- official code
def official_family(path: str) -> str:
    """``'cvt'`` or ``'cmt'``: which official repository ``path`` is a checkout of.

    Raises:
        ValueError: naming the files looked for, and where to clone the repositories.
    """
    for family, file in OFFICIAL_FILES.items():
        if osp.isfile(osp.join(path, file)):
            return family
    raise ValueError(
        f'--official {path!r} is not the root of a checkout of the official code: it has '
        f'neither {OFFICIAL_FILES["cvt"]} (git clone {OFFICIAL_REPOS["cvt"]}) nor '
        f'{OFFICIAL_FILES["cmt"]} (git clone {OFFICIAL_REPOS["cmt"]})')


def _drop_path_rates(rate, depths: Sequence[int]) -> list:
    """Our CvT's ``drop_path_rate`` as the official per-stage ``DROP_PATH_RATE``: a float is
    the last stage's (the official recipe), three floats are per stage."""
    if isinstance(rate, (int, float)):
        return [0.0] * (len(depths) - 1) + [float(rate)]
    return [float(r) for r in rate]


def official_peer_config(model_cfg: dict, path: str, size: Sequence[int]) -> dict:
    """The config of the official model with the arch, classes and stochastic depth of our
    ``model_cfg``, run on inputs of ``size`` (h, w), from the checkout at ``path``.

    Raises:
        ValueError: ``path`` is no checkout, or one of the other family; our model is no
            classifier (``out_type='logits'``); its arch is not the checkout's (a named
            CvT arch whose config yaml says otherwise); the official CMT would need a
            non-square input.
    """
    family = official_family(path)
    ours = str(model_cfg.get('type'))
    if ours.lower() != family:
        raise ValueError(f'--official {path!r} is a checkout of the official {family.upper()} '
                         f'code ({OFFICIAL_REPOS[family]}), but --model is type={ours!r}')
    _check_logits(model_cfg, '--official', 'the official')
    cfg = dict(type='OfficialLogits', family=family, path=osp.abspath(path),
               num_classes=model_cfg.get('num_classes', 1000))
    if family == 'cvt':
        from cvt_mm.models._helpers import resolve_arch
        from cvt_mm.models.cvt import CvT
        arch = model_cfg.get('arch', '13')
        row = resolve_arch(arch, CvT.arch_zoo, 3)
        spec = _cvt_yaml_spec(path, CVT_YAMLS.get(arch, CVT_YAMLS['13']) if
                              isinstance(arch, str) else CVT_YAMLS['13'])
        if isinstance(arch, str):  # our table and their config must agree
            theirs = [spec['DIM_EMBED'], spec['NUM_HEADS'], spec['DEPTH']]
            if theirs != [list(row[k]) for k in ('embed_dims', 'num_heads', 'depths')]:
                raise ValueError(f'CvT-{arch}: the official config {CVT_YAMLS[arch]} has '
                                 f'dims, heads, depths {theirs}, our arch table {row}')
        spec.update(DIM_EMBED=list(row['embed_dims']), NUM_HEADS=list(row['num_heads']),
                    DEPTH=list(row['depths']), DROP_PATH_RATE=_drop_path_rates(
                        model_cfg.get('drop_path_rate', 0.1), row['depths']))
        cfg['spec'] = spec
    else:
        if size[0] != size[1]:
            raise ValueError('the official CMT runs only at the square size it is built for '
                             f'(its relative position biases fix it), got {size[0]}x{size[1]}')
        cfg.update(img_size=int(size[0]), arch=model_cfg.get('arch', 's'),
                   drop_path_rate=float(model_cfg.get('drop_path_rate', 0.1)))
    return cfg


def _cvt_yaml_spec(path: str, name: str) -> dict:
    import yaml
    file = osp.join(path, 'experiments', 'imagenet', 'cvt', name)
    if not osp.isfile(file):
        raise ValueError(f'--official {path!r}: no {osp.relpath(file, path)} (a checkout of '
                         f'{OFFICIAL_REPOS["cvt"]} has it)')
    with open(file) as f:
        return dict(yaml.safe_load(f)['MODEL']['SPEC'])


def load_official_module(path: str, family: str) -> types.ModuleType:
    """The official model file of the checkout at ``path``, run unmodified as a module of its
    own name (``_official_cvt_models.cls_cvt``, its package's ``__init__`` run first, or
    ``_official_cmt``), once per process. Before microsoft/CvT's file, a ``torch._six``
    with ``container_abcs`` where PyTorch no longer has one."""
    if importlib.util.find_spec('timm') is None:
        raise ImportError('--official runs the official code, which imports timm: '
                          'pip install -e .[peers]')
    with warnings.catch_warnings():  # timm 1's FutureWarnings about the old module names
        warnings.simplefilter('ignore', FutureWarning)
        return _load_official_module(path, family)


def _load_official_module(path: str, family: str) -> types.ModuleType:
    if family == 'cvt':
        try:
            import torch._six  # noqa: F401 - PyTorch < 2 still has it
        except ImportError:
            six = types.ModuleType('torch._six')
            six.container_abcs = collections.abc
            sys.modules['torch._six'] = six
        name, folder = '_official_cvt_models', osp.join(path, 'lib', 'models')
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, osp.join(folder, '__init__.py'), submodule_search_locations=[folder])
            package = importlib.util.module_from_spec(spec)
            sys.modules[name] = package
            spec.loader.exec_module(package)
        return sys.modules[f'{name}.cls_cvt']
    name = '_official_cmt'
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, osp.join(path, OFFICIAL_FILES[family]))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Node(dict):
    """The attribute access of the yacs ``CfgNode`` that ``get_cls_model`` reads."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as err:
            raise AttributeError(key) from err


def build_official(cfg: dict) -> torch.nn.Module:
    """The official model of an :func:`official_peer_config` (its own random init)."""
    module = load_official_module(cfg['path'], cfg['family'])
    if cfg['family'] == 'cvt':
        return module.get_cls_model(_Node(
            MODEL=_Node(SPEC=_Node(cfg['spec']), NUM_CLASSES=cfg['num_classes'],
                        INIT_WEIGHTS=False), VERBOSE=False))
    arch, common = cfg['arch'], dict(num_classes=cfg['num_classes'], img_size=cfg['img_size'],
                                     drop_path_rate=cfg['drop_path_rate'])
    if isinstance(arch, str):
        return getattr(module, f'cmt_{arch}')(**common)
    from cvt_mm.models.cmt import CMT
    with torch.device('meta'):  # our resolution of the arch dict's defaults
        row = CMT(arch=arch, num_classes=0).arch_settings
    return module.CMT(embed_dims=list(row['embed_dims']), stem_channel=row['stem_channels'],
                      num_heads=list(row['num_heads']), depths=list(row['depths']),
                      mlp_ratios=[row['mlp_ratio']] * 4, sr_ratios=list(row['sr_ratios']),
                      fc_dim=row['fc_channels'], dp=row['head_drop_rate'], qkv_bias=True,
                      **common)


class OfficialLogits(torch.nn.Module):
    """An official model (:func:`build_official`) returning ``(logits,)``, as
    ``out_type='logits'`` does: the peer of ``benchmark.py backbone --official PATH``.

    Example::

        >>> cfg = official_peer_config(dict(type='CvT', arch='13', out_type='logits'),
        ...                            '/path/to/CvT', (224, 224))
        >>> logits, = OfficialLogits(cfg)(torch.randn(2, 3, 224, 224))
    """

    def __init__(self, cfg: dict):
        super().__init__()
        self.in_channels = 3
        self.model = build_official(cfg)

    def forward(self, x: torch.Tensor) -> tuple:
        logits = self.model(x)
        # microsoft/CvT squeezes the cls token, and with it a batch of one.
        return (logits.reshape(x.shape[0], -1), )


# ------------------------------------------------------------------------- dispatch
def peer_config(path: str, model_cfg: dict, size: Sequence[int],
                official: Optional[str] = None) -> dict:
    """The config of the peer that the tool's attention ``path`` (``'hf'``, ``'official'``)
    names, at our ``model_cfg``'s arch and the input ``size``."""
    if path == 'hf':
        return hf_peer_config(model_cfg)
    if path == 'official':
        return official_peer_config(model_cfg, official, size)
    if path in ENTRY_POINTS:
        return entry_point_config(path, model_cfg)
    raise ValueError(f'no peer is named {path!r}; peers: {PEER_PATHS}')


def build_peer(cfg: dict) -> torch.nn.Module:
    """The peer model of a :func:`peer_config`."""
    if cfg['type'] == 'HFCvtLogits':
        return HFCvtLogits(cfg['arch'], cfg['num_classes'])
    if cfg['type'] == 'OfficialLogits':
        return OfficialLogits(cfg)
    if cfg['type'] == 'EntryPoint':
        return EntryPoint(cfg)
    raise ValueError(f'not a peer config: {cfg!r}')
