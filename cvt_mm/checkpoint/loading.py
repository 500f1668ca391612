"""Loading checkpoints into models, the top layer of checkpoint I/O: a path or URL in any
known layout of a family, read safely (:mod:`.io`), downloaded and verified when a URL
(:mod:`.hub`, told the SHA-256 from :mod:`.published`), recognised and renamed
(:mod:`.formats`), then loaded with one behaviour for every layout:

* a checkpoint of another architecture (tensors of another shape, parameters the file lacks
  or keys the model lacks, outside the classifier head and our optional output norms) raises,
  naming the keys and the architecture each side looks like; ``allow_partial=True`` loads what
  fits instead and logs the rest by name;
* a classifier head whose ``num_classes`` differs is skipped with a warning;
* a model may adapt tensors whose shape legitimately depends on the input resolution (CMT's
  relative position biases) through ``adapt_pretrained_state_dict``.

The same checks serve timm's ``pretrained_filter_fn`` (:func:`fit_state_dict` on what timm
read), so a wrong file fails the same way through ``timm.create_model``.

Messages go to MMEngine's current logger when the process uses MMEngine, else to the
``cvt_mm`` logger of Python's ``logging``.

Example (after ``python tools/misc/download_checkpoints.py cmt-small``;
:func:`load_pretrained` has one that runs without the file)::

    from cvt_mm.models import CMT

    model = CMT(arch='s', num_classes=0)
    load_pretrained(model, 'checkpoints/cmt_small.pth', family='cmt')
"""
from __future__ import annotations

import logging
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .formats import StateDict, convert_state_dict, extract_state_dict
from .hub import cached_download, is_url
from .io import CheckpointError, read_local
from .published import download_hint, published_for_url

__all__ = ['read_checkpoint', 'load_from_http', 'load_from_local', 'arch_of', 'fit_state_dict',
           'load_pretrained', 'checkpoint_misfit', 'log']


def log(message: str, level: int = logging.INFO, logger=None) -> None:
    """``message`` to ``logger``; else to MMEngine's current logger when the process has
    imported MMEngine (a training run's log file); else to the ``cvt_mm`` logger."""
    if logger is None and 'mmengine' in sys.modules:
        from mmengine.logging import print_log
        print_log(message, logger='current', level=level)
        return
    (logger or logging.getLogger('cvt_mm')).log(level, message)


def read_checkpoint(path: str, family: Optional[str] = None) -> dict:
    """Read a ``.pth``/``.pt``/``.bin``/``.ckpt`` (safe unpickling) or ``.safetensors`` file.

    ``path`` may be an ``http://`` or ``https://`` URL: the file is downloaded once into the
    torch hub cache and checked against its SHA-256 when :data:`~.published.PUBLISHED` knows
    it (:mod:`.hub`), then read like a local file. A path that is not a readable weight file
    (missing, another kind of URL, a directory, empty, an HTML page, truncated, carrying
    pickled objects) raises :class:`~.io.CheckpointError` saying which of these it is and what
    to do; a failed download raises its subclass :class:`~.hub.DownloadError`.

    Args:
        path (str): a file or an ``http(s)://`` URL.
        family (str, optional): ``'cvt'`` or ``'cmt'``: the errors then say where that
            family's weights are published. Default None.

    Returns:
        dict: what the file holds, as ``torch.load`` would give it.

    Raises:
        CheckpointError: not a readable weight file, naming why.
        DownloadError: a URL that could not be downloaded or failed its check.

    Example::

        >>> from cvt_mm.models import CMTModel
        >>> torch.save({'model': CMTModel('ti').state_dict()}, 'cmt_tiny.pth')
        >>> len(read_checkpoint('cmt_tiny.pth', 'cmt')['model'])
        708
        >>> read_checkpoint('cmt_small.pth', 'cmt')
        Traceback (most recent call last):
        ...
        cvt_mm.checkpoint.io.CheckpointError: ...tools/misc/download_checkpoints.py cmt-small...
    """
    if isinstance(path, str) and is_url(path):
        entry = published_for_url(path)
        path = cached_download(path, sha256=entry.sha256 if entry else None)
    return read_local(path, hint=download_hint(os.fspath(path), family)
                      if isinstance(path, (str, os.PathLike)) else '')


def load_from_http(filename: str, map_location=None) -> dict:
    """MMEngine's ``http://``/``https://`` checkpoint loader, replaced by
    :func:`cvt_mm.setup_process` (which our tools call).

    MMEngine's own loader is ``torch.hub.load_state_dict_from_url``, which unpickles with
    ``weights_only=False`` (a downloaded file could run arbitrary code), checks neither the
    length of what arrived nor our SHA-256s, and caches HF files of different repositories
    under one name. This one is :func:`read_checkpoint`, so ``load_from = URL`` and
    ``tools/test.py CONFIG URL`` get the cache, the checks and safe reading. Tensors are
    loaded on the CPU; ``map_location`` is accepted for MMEngine's signature (loading into
    the model copies them to its device).

    Args:
        filename (str): the URL.
        map_location: ignored (the tensors stay on the CPU).

    Returns:
        dict: the checkpoint, as :func:`read_checkpoint` reads it.

    Example (once :func:`cvt_mm.setup_process` ran)::

        from mmengine.runner import load_checkpoint

        load_checkpoint(model, 'https://example.org/epoch_12.pth')  # comes here
    """
    return read_checkpoint(filename)


def load_from_local(filename: str, map_location=None) -> dict:
    """MMEngine's loader of local checkpoint files, replaced by :func:`cvt_mm.setup_process`
    (which our tools call): :func:`~.io.read_local` (tensors on the CPU, ``map_location``
    accepted for MMEngine's signature), so that resuming reads safely on every supported
    stack. MMEngine's own ``torch.load`` unpickles anything under torch < 2.6 (its default
    was ``weights_only=False``), and OneDL's MMEngine falls back to that when safe loading
    fails; this one never does (:func:`cvt_mm.compat.safe_load`).

    Args:
        filename (str): the file (``~`` expanded).
        map_location: ignored (the tensors stay on the CPU).

    Returns:
        dict: the checkpoint, as :func:`~.io.read_local` reads it.

    Example (once :func:`cvt_mm.setup_process` ran, as in our tools)::

        runner.resume('work_dirs/run/iter_8.pth')  # comes here
    """
    return read_local(os.path.expanduser(filename), mmap=False)


# Keys a backbone may lack in a checkpoint or ignore from it without being the wrong model:
# the classifier head (absent in headless files, different class count) and our optional
# output norms for dense heads (no official file has them).
_OPTIONAL_PREFIXES = ('out_norms.', )


def arch_of(sd: StateDict, arch_zoo: Dict[str, dict], family: str) -> str:
    """Name the architecture a state dict in our layout looks like, for error messages.

    Args:
        sd (dict): tensors in our layout.
        arch_zoo (dict): the family's published variants (``CvTModel.arch_zoo``).
        family (str): ``'cvt'`` or ``'cmt'``.

    Returns:
        str: ``'CvT-13'``, or ``'a custom CvT arch (depths [...], embed_dims [...])'`` when no
        variant matches.

    Example::

        >>> from cvt_mm.models import CvTModel
        >>> arch_of(CvTModel('21').state_dict(), CvTModel.arch_zoo, 'cvt')
        'CvT-21'
    """
    depths: Dict[int, int] = {}
    dims: Dict[int, int] = {}
    for key, value in sd.items():
        block = re.match(r'stages\.(\d+)\.blocks\.(\d+)\.', key)
        if block:
            stage, index = int(block.group(1)), int(block.group(2))
            depths[stage] = max(depths.get(stage, 0), index + 1)
        embed = re.match(r'stages\.(\d+)\.patch_embed\.proj\.weight$', key)
        if embed:
            dims[int(embed.group(1))] = value.shape[0]
    stages = sorted(set(depths) | set(dims))
    found_depths = [depths.get(i, 0) for i in stages]
    found_dims = [dims.get(i, 0) for i in stages]
    label = {'cvt': 'CvT', 'cmt': 'CMT'}.get(family, family)
    for name, spec in arch_zoo.items():
        if list(spec['depths']) == found_depths and list(spec['embed_dims']) == found_dims:
            return f'{label}-{name.upper() if family == "cmt" else name}'
    return f'a custom {label} arch (depths {found_depths}, embed_dims {found_dims})'


PARTIAL_HINT = (", or load what fits on purpose with init_cfg=dict(type='Pretrained', "
                "checkpoint=..., allow_partial=True)")


def fit_state_dict(model: torch.nn.Module, sd: StateDict, family: str, source: str,
                   layout: str, head_prefixes: Tuple[str, ...] = ('head.', ),
                   allow_partial: bool = False, reshapable: Sequence[str] = (),
                   logger=None, partial_hint: str = PARTIAL_HINT) -> StateDict:
    """What of ``sd`` (in our layout) to load into ``model``, checked against it.

    A classifier head of another shape is dropped with a warning. Any other tensor of another
    shape, parameter the file lacks or key the model lacks (outside the head and our optional
    output norms) raises :class:`CheckpointError` naming the keys and the architecture each side
    looks like, unless ``allow_partial`` (then only what fits is returned, the rest logged).
    ``reshapable`` keys are passed on whatever their shape, for a caller that adapts them (timm
    adapts the first convolution to ``in_chans``).
    """
    own = model.state_dict()
    sd = dict(sd)
    skipped_head, mismatched = [], []
    for key in list(sd):
        if key in own and own[key].shape != sd[key].shape and key not in reshapable:
            if key.startswith(head_prefixes):
                skipped_head.append(f'{key} (checkpoint {tuple(sd[key].shape)}, '
                                    f'model {tuple(own[key].shape)})')
                del sd[key]
            else:
                mismatched.append(f'{key}: checkpoint {tuple(sd[key].shape)} vs model '
                                  f'{tuple(own[key].shape)}')
    tolerated = tuple(head_prefixes) + _OPTIONAL_PREFIXES

    def matters(key: str) -> bool:  # BN's step counter: absent from some published files
        return not key.startswith(tolerated) and not key.endswith('num_batches_tracked')

    missing = sorted(filter(matters, set(own) - set(sd)))
    unused = sorted(filter(matters, set(sd) - set(own)))
    if (mismatched or missing or unused) and not allow_partial:
        zoo = getattr(type(model), 'arch_zoo', {})
        listed = '; '.join(
            f'{len(items)} {what}: {", ".join(items[:3])}{", ..." if len(items) > 3 else ""}'
            for what, items in (('tensors of another shape', mismatched),
                                ('model parameters not in the file', missing),
                                ('keys of the file the model lacks', unused)) if items)
        raise CheckpointError(
            f'{source} ({layout}) does not fit the model: {listed}. The checkpoint looks like '
            f'{arch_of(sd, zoo, family)}; the model is {arch_of(own, zoo, family)}. Use the '
            f"checkpoint of the model's architecture{partial_hint}.")
    if mismatched:  # allow_partial: keep the model's own values for these
        for item in mismatched:
            del sd[item.split(':')[0]]
        log(f'allow_partial: {len(mismatched)} tensors of another shape not loaded: '
            + '; '.join(mismatched), logging.WARNING, logger)
    if skipped_head:
        log('Skipped the classifier head (different num_classes): ' + ', '.join(skipped_head),
            logging.WARNING, logger)
    return sd


def convert_for(model: torch.nn.Module, ckpt: dict, family: str, source: str,
                prefix: Optional[str] = None) -> Tuple[StateDict, str]:
    """``ckpt`` (any container, any layout of ``family``) renamed into our layout and adapted
    to ``model`` (CMT's biases trained at another resolution); returns it and the layout."""
    sd, _ = extract_state_dict(ckpt, prefix)
    try:
        sd, layout = convert_state_dict(sd, family)
    except CheckpointError as err:
        zoo = getattr(type(model), 'arch_zoo', {})
        raise CheckpointError(f'{source}: {err} The model is '
                              f'{arch_of(model.state_dict(), zoo, family)}.') from None
    if hasattr(model, 'adapt_pretrained_state_dict'):
        sd = model.adapt_pretrained_state_dict(sd)
    return sd, layout


def load_pretrained(model: torch.nn.Module, path: str, family: str,
                    prefix: Optional[str] = None,
                    head_prefixes: Tuple[str, ...] = ('head.', ),
                    allow_partial: bool = False, logger=None) -> None:
    """Load a backbone's weights, in any known layout of its family, from a file or URL: what
    ``init_cfg=dict(type='Pretrained', checkpoint=...)`` does for our backbones.

    The checkpoint is unwrapped (:func:`~.formats.extract_state_dict`), renamed into our layout
    (:func:`~.formats.convert_state_dict`) and fitted to the model (:func:`fit_state_dict`:
    CMT's position biases resampled to the model's input size; a classifier head of another
    shape or absent left as it is); what is missing or unused is logged.

    Args:
        model (torch.nn.Module): a :class:`~cvt_mm.models.CvT`, :class:`~cvt_mm.models.CMT`
            or their models.
        path (str): a file or an ``http(s)://`` URL (:func:`read_checkpoint`).
        family (str): ``'cvt'`` or ``'cmt'``.
        prefix (str, optional): load only the keys under it (``'backbone.'`` of a detector's
            checkpoint). Default None: ``module.``/``backbone.`` stripped when present.
        head_prefixes (tuple[str]): the classifier's keys, which may be absent or of another
            shape. Default ``('head.',)``.
        allow_partial (bool): accept a checkpoint that covers only part of the model. Default
            False: a checkpoint of another architecture raises.
        logger (logging.Logger, optional): where to log. Default None: MMEngine's current
            logger, else the ``cvt_mm`` logger.

    Raises:
        CheckpointError: not a weight file, another family's or architecture's weights.

    Example::

        >>> from cvt_mm.models import CvT, CvTModel
        >>> torch.save({'state_dict': CvTModel('13').state_dict()}, 'cvt13.pth')
        >>> import logging
        >>> backbone = CvT(arch='13')
        >>> load_pretrained(backbone, 'cvt13.pth', 'cvt', logger=logging.getLogger('my_run'))
        >>> load_pretrained(CvT(arch='21'), 'cvt13.pth', 'cvt')
        Traceback (most recent call last):
        ...
        cvt_mm.checkpoint.io.CheckpointError: ...CvT-13...CvT-21...
    """
    sd, layout = convert_for(model, read_checkpoint(path, family), family, path, prefix)
    sd = fit_state_dict(model, sd, family, path, layout, head_prefixes, allow_partial,
                        logger=logger)
    result = model.load_state_dict(sd, strict=False)
    log(f'Loaded {type(model).__name__} weights from {path} (format: {layout}, '
        f'{len(sd)} tensors)', logger=logger)
    if result.missing_keys:
        log(f'Missing keys ({len(result.missing_keys)}): {", ".join(result.missing_keys)}',
            logging.WARNING, logger)
    if result.unexpected_keys:
        log(f'Unused keys ({len(result.unexpected_keys)}): '
            f'{", ".join(result.unexpected_keys)}', logging.WARNING, logger)


def _listed(items: List[str], limit: int = 3) -> str:
    return ', '.join(items[:limit]) + (', ...' if len(items) > limit else '')


def checkpoint_misfit(model: torch.nn.Module, path: str) -> Optional[str]:
    """How the MMEngine checkpoint at ``path`` fails to fit the whole ``model`` (detector,
    segmentor or classifier), or ``None`` when every parameter and buffer is in it with the
    model's shape. For tools that load a trained model (``tools/test.py``, the image demo),
    where MMEngine's non-strict loading would otherwise evaluate a partly random model.

    Args:
        model (torch.nn.Module): the whole model.
        path (str): the checkpoint (file or URL).

    Returns:
        str | None: what does not fit, with a hint (a backbone-only file, another number of
        classes), or None.

    Example::

        >>> from cvt_mm.models import CvTModel
        >>> model = CvTModel('13', num_classes=10)
        >>> torch.save({'state_dict': model.state_dict()}, 'cls10.pth')
        >>> checkpoint_misfit(model, 'cls10.pth') is None
        True
        >>> print(checkpoint_misfit(CvTModel('13', num_classes=5), 'cls10.pth'))
        cls10.pth does not fit the model: 2 have another shape (head.bias: checkpoint (10,)
        vs model (5,), head.weight: checkpoint (10, 384) vs model (5, 384)). A head of another
        shape usually means another number of classes: use the config the checkpoint was
        trained with.
    """
    ckpt = read_checkpoint(path)
    sd = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else {}
    sd = {re.sub(r'^module\.', '', k): v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    own = model.state_dict()

    def matters(key: str) -> bool:
        return not key.endswith('num_batches_tracked')

    missing = sorted(filter(matters, set(own) - set(sd)))
    mismatched = sorted(f'{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}'
                        for k in set(own) & set(sd) if sd[k].shape != own[k].shape)
    if not missing and not mismatched:
        return None
    parts = []
    if missing:
        parts.append(f'{len(missing)} of the model\'s {len(own)} parameters and buffers are not '
                     f'in it ({_listed(missing)})')
    if mismatched:
        parts.append(f'{len(mismatched)} have another shape ({_listed(mismatched)})')
    hint = ''
    if missing and all(not k.startswith('backbone.') for k in sd) and \
            any(k.startswith('backbone.') for k in own):
        hint = (' It holds no backbone.* keys: a backbone-only file initialises a backbone '
                "through init_cfg=dict(type='Pretrained', checkpoint=...); evaluate the "
                "checkpoint of a trained model instead.")
    elif mismatched and any('cls' in m or 'logits' in m or 'head' in m for m in mismatched):
        hint = (' A head of another shape usually means another number of classes: use the '
                'config the checkpoint was trained with.')
    return f'{path} does not fit the model: ' + '; '.join(parts) + '.' + hint
