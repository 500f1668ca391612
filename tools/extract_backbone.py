"""Turn a classifier (or any MMEngine / official) checkpoint into a clean backbone checkpoint.

    python tools/extract_backbone.py work_dirs/imagenet_cvt13_300e_in1k/epoch_300.pth cvt13_in1k.pth

The output holds only the backbone's tensors in this project's key layout, without the
``backbone.`` prefix, optimizer state or message hub, so ``init_cfg=dict(type='Pretrained',
checkpoint='cvt13_in1k.pth')`` in any detection, segmentation or classification config loads it.
Inputs may be a classifier / detector / segmentor checkpoint written by MMEngine, or an official
or Hugging Face file: every layout ``cvt_mm/models/weights.py`` knows is converted.

``--add-prefix backbone.`` nests the keys under a prefix instead, which makes an official
checkpoint loadable by ``tools/test.py`` through a classification config (MMEngine's
``load_from`` loads the whole ``ImageClassifier``, whose backbone keys start with ``backbone.``).
If the run used EMA, MMEngine's ``EMAHook`` has already swapped the averaged weights into the
checkpoint's ``state_dict``, so those are what is extracted.
"""
import argparse
import os
import os.path as osp
import sys
from typing import Optional, Tuple

import torch

# Runnable as a plain script from anywhere: the package lives one level up.
sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

import cvt_mm  # noqa: E402,F401  (allow-lists MMEngine's checkpoint types for safe loading)
from cvt_mm.models.weights import (CheckpointError, StateDict,  # noqa: E402
                                   convert_state_dict, extract_state_dict, read_checkpoint)

# CMT first: its layouts are recognised by keys only CMT has (``relative_pos``), whereas the
# CvT matcher of our own layout (``stages.0.patch_embed.proj``) also matches CMT's.
FAMILIES = ('cmt', 'cvt')


def convert_any_family(sd: StateDict, family: Optional[str]) -> Tuple[StateDict, str, str]:
    """Convert with the given family, or the first family whose layouts recognise the keys.
    Returns (state_dict, family, format name)."""
    if family is not None:
        if family not in FAMILIES:
            raise ValueError(f'family={family!r} is not supported; allowed: {FAMILIES}')
        converted, fmt = convert_state_dict(sd, family)
        return converted, family, fmt
    reasons = []
    for candidate in FAMILIES:
        try:
            converted, fmt = convert_state_dict(sd, candidate)
        except CheckpointError as err:
            reasons.append(str(err))
            continue
        return converted, candidate, fmt
    raise CheckpointError('the checkpoint matches no CvT or CMT layout:\n  ' + '\n  '.join(reasons))


def extract_backbone(src: str, dst: str, family: Optional[str] = None,
                     prefix: Optional[str] = None, add_prefix: str = '') -> dict:
    """Write ``dst`` and return a summary (family, format, number of tensors, dropped keys)."""
    if osp.abspath(src) == osp.abspath(dst):
        raise ValueError(f'the output must not overwrite the input checkpoint {src}')
    if add_prefix and not add_prefix.endswith('.'):
        raise ValueError(f'--add-prefix must end with ".", got {add_prefix!r} '
                         "(e.g. 'backbone.')")
    sd, dropped = extract_state_dict(read_checkpoint(src), prefix)
    sd, family, fmt = convert_any_family(sd, family)
    # Slices of bigger tensors would otherwise drag their whole storage into the file.
    sd = {add_prefix + k: v.detach().clone().contiguous() for k, v in sd.items()}
    os.makedirs(osp.dirname(osp.abspath(dst)), exist_ok=True)
    if dst.endswith('.safetensors'):
        from safetensors.torch import save_file
        save_file(sd, dst, metadata={'family': family, 'source_format': fmt})
    else:
        torch.save({'state_dict': sd,
                    'meta': {'family': family, 'source_format': fmt,
                             'source': osp.basename(src)}}, dst)
    return dict(family=family, format=fmt, tensors=len(sd), dropped=dropped)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('src', help='classifier / detector / segmentor / official checkpoint')
    parser.add_argument('dst', help='output file (.pth, or .safetensors)')
    parser.add_argument('--family', choices=FAMILIES,
                        help='backbone family (default: recognised from the keys)')
    parser.add_argument('--prefix', help='take the keys under this prefix (default: strip '
                        '"module." and "backbone." wherever present)')
    parser.add_argument('--add-prefix', default='', help='write the keys under this prefix, '
                        'e.g. "backbone." to evaluate the result with tools/test.py')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    summary = extract_backbone(args.src, args.dst, args.family, args.prefix, args.add_prefix)
    print(f'{args.dst}: {summary["tensors"]} {summary["family"]} tensors '
          f'(source layout {summary["format"]}; {summary["dropped"]} keys of other modules '
          'dropped)')


if __name__ == '__main__':
    main()
