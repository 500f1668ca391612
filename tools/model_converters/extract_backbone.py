"""Extract a clean backbone checkpoint from a classifier (or any MMEngine) checkpoint.

    python tools/model_converters/extract_backbone.py \
        work_dirs/imagenet_cvt13_300e_in1k/epoch_300.pth cvt13_in1k.pth

The output holds only the backbone's tensors in this project's layout, without ``backbone.``,
optimizer state or message hub, so ``init_cfg=dict(type='Pretrained', checkpoint=...)`` in any
detection, segmentation or classification config loads it. If the run used EMA, MMEngine's
``EMAHook`` has already swapped the averaged weights into the checkpoint's ``state_dict``, so those
are what is extracted. The same command as ``convert_weights.py``, under the name the
pretraining workflow looks for; it takes the same options.
"""
import sys

import cvt_mm  # noqa: F401  (registers the layouts; MMEngine's checkpoint types load safely)
from cvt_mm.checkpoint.convert import main

if __name__ == '__main__':
    sys.exit(main(description=__doc__))
