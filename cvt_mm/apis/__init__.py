"""What the tools, the benchmarks and users' scripts call on a config's whole model, as
``mmdet.apis`` and ``mmdeploy.apis`` hold theirs; ``import cvt_mm`` does not load it.

- :mod:`cvt_mm.apis.builders`: a config's whole model from random weights, and synthetic
  batches for it (no data on disk);
- :mod:`cvt_mm.apis.flops`: FLOP counting with attention, of a module or a config's model;
- :mod:`cvt_mm.apis.deployment`: ONNX export and its check with ONNX Runtime (the ``deploy``
  extra); :mod:`cvt_mm.apis.end2end`: the whole model as one graph (post-processing restated
  for ``torch.export``, the file's metadata, matching a graph's results with ``predict``'s);
- :mod:`cvt_mm.apis.visualization`: a detector's predictions drawn larger than its input;
- :mod:`cvt_mm.apis.launch`: what ``tools/train.py`` and ``tools/test.py`` do around the
  runner (the command line, slurm's environment, the process group, the checkpoint to
  continue from, exit code 75 on preemption);
- :mod:`cvt_mm.apis.stacks`: the package combinations that cannot work (standard library
  only: the set-up checks a stack's requirements with it before installing anything);
- :mod:`cvt_mm.apis.collect_env`: ``python -m cvt_mm.apis.collect_env``, the versions found
  and which parts of cvt_mm work in this environment.

Import from the module (``from cvt_mm.apis.flops import get_flops``): this package imports
none of them, so a tool loads only what it uses (ONNX export needs none of FLOP counting's).
"""
