"""Rewrite a checkpoint as a clean backbone checkpoint in this project's layout.

    python tools/convert_weights.py SRC DST [--family cvt|cmt] [--prefix backbone.] [--add-prefix P]

SRC may be any layout ``cvt_mm.models.weights`` knows (official model zoo, Hugging Face
``.safetensors``/``.bin``, ours bare or inside an MMEngine classifier / detector / segmentor
checkpoint); the family and layout are recognised from the keys unless ``--family`` is given.
Other modules' keys (neck, heads), optimizer state and message hub are dropped. DST is a ``.pth``
holding ``{'state_dict': ..., 'meta': ...}`` (or a ``.safetensors`` file) that
``init_cfg=dict(type='Pretrained', checkpoint=DST)`` loads. ``--add-prefix backbone.`` nests the
keys under a prefix instead, which makes an official checkpoint loadable by ``tools/test.py``
through a classification config (its ``load_from`` loads the whole ``ImageClassifier``).
All format knowledge lives in ``weights.py``; this tool only drives it.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cvt_mm  # noqa: E402,F401  (allow-lists MMEngine's checkpoint types for safe loading)
from cvt_mm.models import weights  # noqa: E402


def parse_args(argv=None, description=__doc__):
    families = sorted({fmt.family for fmt in weights.formats()})
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


def convert(src: str, dst: str, family=None, prefix=None, add_prefix: str = '') -> dict:
    """Convert ``src`` into ``dst``; returns the ``meta`` written."""
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError(f'the output must not overwrite the input checkpoint {src}')
    if add_prefix and not add_prefix.endswith('.'):
        raise ValueError(f'--add-prefix must end with ".", got {add_prefix!r} (e.g. "backbone.")')
    sd, dropped = weights.extract_state_dict(weights.read_checkpoint(src, family), prefix)
    sd, fmt_name = weights.convert_state_dict(sd, family)
    # Slices of bigger tensors would otherwise drag their whole storage into the file.
    sd = {add_prefix + k: v.detach().clone().contiguous() for k, v in sd.items()}
    meta = dict(family=weights.format_family(fmt_name), source=os.path.abspath(src),
                source_format=fmt_name, dropped_wrapper_keys=dropped, num_tensors=len(sd))
    save_atomically(sd, meta, dst)
    return meta


def save_atomically(sd: dict, meta: dict, dst: str) -> None:
    """Write under a temporary name, then rename: an interrupted or failed write never leaves
    a truncated file under ``dst``. Failures name the path and the reason."""
    tmp = f'{dst}.tmp{os.getpid()}'
    try:
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        if dst.endswith('.safetensors'):
            from safetensors.torch import save_file
            save_file(sd, tmp, metadata={k: str(v) for k, v in meta.items()})
        else:
            torch.save({'state_dict': sd, 'meta': meta}, tmp)
        os.replace(tmp, dst)
    except (OSError, RuntimeError) as err:
        reason = getattr(err, 'strerror', None) or str(err).split('strerror: ')[-1]
        raise ValueError(f'cannot write {dst}: {reason} (is its folder writable, with space '
                         'left?)') from err
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv=None, description=__doc__) -> int:
    args = parse_args(argv, description)
    try:
        meta = convert(args.src, args.dst, args.family, args.prefix, args.add_prefix)
    except (weights.CheckpointError, ValueError) as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    print(f'{args.src} ({meta["source_format"]}, {meta["num_tensors"]} tensors; '
          f'{meta["dropped_wrapper_keys"]} keys of other modules dropped) -> {args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
