"""``tools/analysis_tools/benchmark.py cls-step``, under its former name (same flags).

    python tools/analysis_tools/benchmark_cls_iter.py --help
"""
import sys

from cvt_mm.benchmark import main

if __name__ == '__main__':
    sys.exit(main(['cls-step', *sys.argv[1:]]))
