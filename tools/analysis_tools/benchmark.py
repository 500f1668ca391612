"""Work, time, speed and peak memory of backbones, detector and segmentor training iterations
(per head, beside Swin-T) and classification training steps (the cases and their columns:
``benchmarks/``, in the checkout beside this folder, not in the installed package).

    python tools/analysis_tools/benchmark.py backbone --model "dict(type='CMT', arch='s')" \\
        --sizes 800x1333 --modes infer train --profile 12 [--compile] [--json out.json]
    python tools/analysis_tools/benchmark.py train-iter [--head mask_rcnn] \\
        [--models cvt13 cmt_s swin_t] [--iters 2]
    python tools/analysis_tools/benchmark.py cls-step configs/imagenet_cvt13_300e_in1k.py
    python tools/analysis_tools/benchmark.py compare REF [--cases ...] [--rounds 3]
"""
import os.path as osp
import sys

# The benchmarks live in the checkout, not in the package: run them from it.
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
from benchmarks.cli import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
