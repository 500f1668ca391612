"""Whole models as one ONNX graph, from the preprocessed image to the result
(docs/deployment.md): :mod:`~.models` wraps a config's model and names its outputs,
:mod:`~.detectors` and :mod:`~.ops` restate MMDetection's post-processing for
``torch.export``, :mod:`~.metadata` is what the file stores for a runtime without torch,
:mod:`~.compare` matches a graph's results with ``model.predict``'s.
:mod:`cvt_mm.apis.deployment` exports.
"""
