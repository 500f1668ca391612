"""Extract a clean backbone checkpoint from a classifier (or any MMEngine) checkpoint.

    python tools/model_converters/extract_backbone.py \
        work_dirs/imagenet_cvt13_300e_in1k/epoch_300.pth cvt13_in1k.pth

The output holds only the backbone's tensors in this project's layout, without ``backbone.``,
optimizer state or message hub, so ``init_cfg=dict(type='Pretrained', checkpoint=...)`` in any
detection, segmentation or classification config loads it. If the run used EMA, MMEngine's
``EMAHook`` has already swapped the averaged weights into the checkpoint's ``state_dict``, so those
are what is extracted. This is ``convert_weights.py`` (beside it) under the name the pretraining
workflow looks for; it takes the same options.
"""
import sys

from cvt_mm.weights import convert_checkpoint as extract_backbone  # noqa: F401

# The converter beside this file (a script's folder is on sys.path when it runs).
from convert_weights import main

if __name__ == '__main__':
    sys.exit(main(description=__doc__))
