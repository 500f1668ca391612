"""Rewrite a checkpoint as a clean backbone checkpoint in this project's layout.

    python tools/model_converters/convert_weights.py SRC DST [--family cvt|cmt]
        [--prefix backbone.] [--add-prefix P]

SRC may be any layout ``cvt_mm.weights`` knows (official model zoo, Hugging Face
``.safetensors``/``.bin``, ours bare or inside an MMEngine classifier / detector / segmentor
checkpoint); the family and layout are recognised from the keys unless ``--family`` is given.
Other modules' keys (neck, heads), optimizer state and message hub are dropped. DST is a ``.pth``
holding ``{'state_dict': ..., 'meta': ...}`` (or a ``.safetensors`` file) that
``init_cfg=dict(type='Pretrained', checkpoint=DST)`` loads. ``--add-prefix backbone.`` nests the
keys under a prefix instead, which makes an official checkpoint loadable by ``tools/test.py``
through a classification config (its ``load_from`` loads the whole ``ImageClassifier``).
All format knowledge lives in ``cvt_mm.weights``; this tool only drives it.
"""
import argparse
import sys

import cvt_mm  # noqa: F401  (allow-lists MMEngine's checkpoint types for safe loading)
from cvt_mm import weights


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


def main(argv=None, description=__doc__) -> int:
    args = parse_args(argv, description)
    try:
        meta = weights.convert_checkpoint(args.src, args.dst, args.family, args.prefix,
                                          args.add_prefix)
    except (weights.CheckpointError, ValueError) as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    print(f'{args.src} ({meta["source_format"]}, {meta["num_tensors"]} tensors; '
          f'{meta["dropped_wrapper_keys"]} keys of other modules dropped) -> {args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
