"""Rewriting a checkpoint of any known layout as a clean backbone checkpoint in this
project's layout, and its command line (``tools/model_converters/convert_weights.py``).

SRC may be any layout the families registered (official model zoo, Hugging Face
``.safetensors``/``.bin``, ours bare or inside an MMEngine classifier / detector / segmentor
checkpoint); the family and layout are recognised from the keys unless ``--family`` is given.
Other modules' keys (neck, heads), optimizer state and message hub are dropped. DST is a
``.pth`` holding ``{'state_dict': ..., 'meta': ...}`` (or a ``.safetensors`` file) that
``init_cfg=dict(type='Pretrained', checkpoint=DST)`` loads. ``--add-prefix backbone.`` nests
the keys under a prefix instead, which makes an official checkpoint loadable by
``tools/test.py`` through a classification config (its ``load_from`` loads the whole
``ImageClassifier``).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import torch

from .formats import convert_state_dict, extract_state_dict, format_family, known_formats
from .io import CheckpointError, write_atomically
from .loading import read_checkpoint

__all__ = ['convert_checkpoint', 'main']


def convert_checkpoint(src: str, dst: str, family: Optional[str] = None,
                       prefix: Optional[str] = None, add_prefix: str = '') -> dict:
    r"""Rewrite any known layout in ``src`` as a clean backbone checkpoint in our layout.

    Other modules' keys (neck, heads), optimizer state and message hub are dropped; the
    output is written whole or not at all.

    Args:
        src (str): the checkpoint (file or URL): any layout the families registered, bare or
            inside an MMEngine classifier, detector or segmentor checkpoint.
        dst (str): a ``.pth`` (then holding ``{'state_dict': ..., 'meta': ...}``) or a
            ``.safetensors`` file; must not be ``src``.
        family (str, optional): ``'cvt'`` or ``'cmt'``. Default None: recognised from the keys.
        prefix (str, optional): take only the keys under it (``'backbone.'``). Default None:
            ``module.``/``backbone.`` stripped when present.
        add_prefix (str): nest the output's keys under it (``'backbone.'``, ending with ``.``).
            Default ``''``.

    Returns:
        dict: the ``meta`` written: family, source, source format, dropped keys, tensors.

    Raises:
        ValueError: ``dst`` is ``src``, cannot be written, or ``add_prefix`` lacks its ``.``.
        CheckpointError: ``src`` is no known layout (naming the known ones).

    Example: the official CvT layout inside a detector's checkpoint, out as a backbone
    checkpoint that ``init_cfg=dict(type='Pretrained', checkpoint='cvt13_ours.pth')`` loads::

        >>> import re
        >>> from cvt_mm.models import CvTModel
        >>> sd = {re.sub(r'^stages\.(\d+)', r'backbone.stage\1', k): v
        ...       for k, v in CvTModel('13').state_dict().items()}
        >>> torch.save({'state_dict': sd, 'meta': {}}, 'mask_rcnn.pth')
        >>> meta = convert_checkpoint('mask_rcnn.pth', 'cvt13_ours.pth')
        >>> meta['family'], meta['source_format']
        ('cvt', 'cvt-official')
    """
    import io
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError(f'the output must not overwrite the input checkpoint {src}')
    if add_prefix and not add_prefix.endswith('.'):
        raise ValueError(f'--add-prefix must end with ".", got {add_prefix!r} (e.g. "backbone.")')
    sd, dropped = extract_state_dict(read_checkpoint(src, family), prefix)
    sd, fmt_name = convert_state_dict(sd, family)
    # Slices of bigger tensors would otherwise drag their whole storage into the file.
    sd = {add_prefix + k: v.detach().clone().contiguous() for k, v in sd.items()}
    meta = dict(family=format_family(fmt_name), source=os.path.abspath(src),
                source_format=fmt_name, dropped_wrapper_keys=dropped, num_tensors=len(sd))
    if dst.endswith('.safetensors'):
        from safetensors.torch import save
        data = save(sd, metadata={k: str(v) for k, v in meta.items()})
    else:
        buffer = io.BytesIO()
        torch.save({'state_dict': sd, 'meta': meta}, buffer)
        data = buffer.getvalue()
    try:
        write_atomically(data, dst)
    except OSError as err:
        raise ValueError(f'cannot write {dst}: {err.strerror or err} (is its folder writable, '
                         'with space left?)') from err
    return meta


def parse_args(argv=None, description: str = __doc__):
    families = sorted({fmt.family for fmt in known_formats()})
    parser = argparse.ArgumentParser(description=description.split('\n\n')[0])
    parser.add_argument('src', help='checkpoint to convert (.pth/.bin/.safetensors/...)')
    parser.add_argument('dst', help="output .pth (or .safetensors) in this project's layout")
    parser.add_argument('--family', choices=families,
                        help='backbone family (default: recognised from the keys)')
    parser.add_argument('--prefix', default=None,
                        help='take only the keys under this prefix (e.g. backbone.); by default '
                        'module. and backbone. are stripped when present')
    parser.add_argument('--add-prefix', default='',
                        help='write the keys under this prefix, e.g. "backbone." to evaluate the '
                        'result with tools/test.py')
    return parser.parse_args(argv)


def main(argv=None, description: str = __doc__) -> int:
    """The command line of ``tools/model_converters/convert_weights.py`` (and
    ``extract_backbone.py``): exit status 0, or 1 with the error on stderr."""
    args = parse_args(argv, description)
    try:
        meta = convert_checkpoint(args.src, args.dst, args.family, args.prefix,
                                          args.add_prefix)
    except (CheckpointError, ValueError) as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    print(f'{args.src} ({meta["source_format"]}, {meta["num_tensors"]} tensors; '
          f'{meta["dropped_wrapper_keys"]} keys of other modules dropped) -> {args.dst}')
    return 0
