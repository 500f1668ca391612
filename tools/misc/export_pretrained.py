"""Write a CvT/CMT checkpoint as a folder that timm and Hugging Face load.

    python tools/misc/export_pretrained.py CHECKPOINT OUT_DIR [--family cvt|cmt]
        [--arch NAME|JSON] [--prefix backbone.]

CHECKPOINT is any layout cvt_mm loads (official, Hugging Face ``microsoft/cvt-*``, ours, or a
trained MMDetection / MMSegmentation / MMPretrain checkpoint of our configs, whose backbone is
taken). OUT_DIR gets ``model.safetensors`` and one ``config.json`` for both libraries:
``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` and
``transformers.AutoModel.from_pretrained(OUT_DIR)`` (after ``import cvt_mm``). The SHA-256 of
the weights is printed. The work is :func:`cvt_mm.models.export.export_pretrained`
(docs/timm_huggingface.md).
"""
import sys

import cvt_mm  # noqa: F401  (registers the layouts)
from cvt_mm.models.export import main

if __name__ == '__main__':
    sys.exit(main(description=__doc__))
