# MMDeploy 1.3.1's configs/mmseg/segmentation_onnxruntime_dynamic.py restated (its
# configs/mmseg/segmentation_dynamic.py): batch, height and width dynamic.
_base_ = ['./segmentation_onnxruntime_static-512x512.py']
onnx_config = dict(
    input_shape=None,
    dynamic_axes={
        'input': {0: 'batch', 2: 'height', 3: 'width'},
        'output': {0: 'batch', 2: 'height', 3: 'width'},
    })
