"""Rewrite a pretrained checkpoint in this project's layout.

    python tools/convert_weights.py SRC DST --family cvt|cmt [--prefix backbone.]

SRC may be any layout ``cvt_mm.models.weights`` knows for the family (official model zoo,
Hugging Face ``.safetensors``/``.bin``, ours inside an MMEngine checkpoint); the layout is
detected from the keys. DST is a ``.pth`` holding ``{'state_dict': ..., 'meta': ...}`` that
``init_cfg=dict(type='Pretrained', checkpoint=DST)`` and MMEngine's ``load_checkpoint`` read.
All format knowledge lives in ``weights.py``; this tool only drives it.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cvt_mm.models import weights  # noqa: E402  (after the path tweak above)


def parse_args(argv=None):
    families = sorted({fmt.family for fmt in weights.formats()})
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='checkpoint to convert (.pth/.bin/.safetensors/...)')
    parser.add_argument('dst', help='output .pth in this project\'s layout')
    parser.add_argument('--family', required=True, choices=families, help='backbone family')
    parser.add_argument('--prefix', default=None,
                        help='take only the keys under this prefix (e.g. backbone.); by default '
                        'module. and backbone. are stripped when present')
    return parser.parse_args(argv)


def convert(src: str, dst: str, family: str, prefix=None) -> dict:
    """Convert ``src`` into ``dst``; returns the ``meta`` written."""
    sd, dropped = weights.extract_state_dict(weights.read_checkpoint(src, family), prefix)
    sd, fmt_name = weights.convert_state_dict(sd, family)
    meta = dict(family=family, source=os.path.abspath(src), source_format=fmt_name,
                dropped_wrapper_keys=dropped, num_tensors=len(sd))
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    torch.save({'state_dict': sd, 'meta': meta}, dst)
    return meta


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        meta = convert(args.src, args.dst, args.family, args.prefix)
    except weights.CheckpointError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    print(f'{args.src} ({meta["source_format"]}, {meta["num_tensors"]} tensors) -> {args.dst}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
