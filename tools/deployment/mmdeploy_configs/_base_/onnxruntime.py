# MMDeploy 1.3.1's configs/_base_/onnx_config.py and configs/_base_/backends/onnxruntime.py
# restated (open-mmlab/mmdeploy at v1.3.1; values unchanged): what every deploy config here
# inherits. MMDeploy's pip wheel ships no configs.
onnx_config = dict(
    type='onnx',
    export_params=True,
    keep_initializers_as_inputs=False,
    opset_version=11,
    save_file='end2end.onnx',
    input_names=['input'],
    output_names=['output'],
    input_shape=None,
    optimize=True)
backend_config = dict(type='onnxruntime')
