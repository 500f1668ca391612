"""Benchmarks of the backbones, detector and segmentor training iterations and
classification steps, beside Swin-T and beside the peers (Hugging Face, the official code,
our own models through timm and transformers). Part of the checkout, not of the installed
package: ``python tools/analysis_tools/benchmark.py COMMAND ...`` runs them
(:mod:`benchmarks.cli`; docs/benchmarks.md).

* :mod:`.measure`: the timer, the memory unit, what a forward holds, the machine's rates,
  profiles;
* :mod:`.cases`: the cases, each run in a process of its own;
* :mod:`.peers`: the peers' models;
* :mod:`.cli`: the command line.
"""
