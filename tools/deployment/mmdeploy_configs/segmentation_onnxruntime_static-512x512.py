# MMDeploy 1.3.1's configs/mmseg/segmentation_onnxruntime_static-512x512.py restated (its
# configs/mmseg/segmentation_static.py, configs/_base_/onnx_config.py and
# configs/_base_/backends/onnxruntime.py; values unchanged): the segmentor, image to the class
# map `output` (B, 1, H, W) int64 (resize and argmax in the graph), at 512x512 (W, H; for
# another size set onnx_config.input_shape).
onnx_config = dict(
    type='onnx',
    export_params=True,
    keep_initializers_as_inputs=False,
    opset_version=11,
    save_file='end2end.onnx',
    input_names=['input'],
    output_names=['output'],
    input_shape=[512, 512],
    optimize=True)
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
backend_config = dict(type='onnxruntime')
