"""``tools/analysis_tools/benchmark.py train-iter``, under its former name (same flags).

    python tools/analysis_tools/benchmark_train_iter.py --help
"""
import sys

from cvt_mm.benchmark import main

if __name__ == '__main__':
    sys.exit(main(['train-iter', *sys.argv[1:]]))
