"""``tools/analysis_tools/benchmark.py backbone``, under its former name (same flags).

    python tools/analysis_tools/benchmark_backbone.py --help
"""
import sys

from cvt_mm.benchmark import main

if __name__ == '__main__':
    sys.exit(main(['backbone', *sys.argv[1:]]))
