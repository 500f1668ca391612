"""Rewrite a checkpoint as a clean backbone checkpoint in this project's layout.

    python tools/model_converters/convert_weights.py SRC DST [--family cvt|cmt]
        [--prefix backbone.] [--add-prefix P]

SRC may be any layout ``cvt_mm.checkpoint`` knows (official model zoo, Hugging Face
``.safetensors``/``.bin``, ours bare or inside an MMEngine classifier / detector / segmentor
checkpoint); the family and layout are recognised from the keys unless ``--family`` is given.
Other modules' keys (neck, heads), optimizer state and message hub are dropped. DST is a ``.pth``
holding ``{'state_dict': ..., 'meta': ...}`` (or a ``.safetensors`` file) that
``init_cfg=dict(type='Pretrained', checkpoint=DST)`` loads. ``--add-prefix backbone.`` nests the
keys under a prefix instead, which makes an official checkpoint loadable by ``tools/test.py``
through a classification config (its ``load_from`` loads the whole ``ImageClassifier``).
The work is :func:`cvt_mm.checkpoint.convert.main`.
"""
import sys

import cvt_mm  # noqa: F401  (registers the layouts; MMEngine's checkpoint types load safely)
from cvt_mm.checkpoint.convert import main

if __name__ == '__main__':
    sys.exit(main(description=__doc__))
