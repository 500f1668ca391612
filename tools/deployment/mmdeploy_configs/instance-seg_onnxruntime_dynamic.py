# MMDeploy 1.3.1's configs/mmdet/instance-seg/instance-seg_onnxruntime_dynamic.py restated (its
# configs/mmdet/_base_/base_instance-seg_dynamic.py): batch, height and width dynamic.
_base_ = ['./instance-seg_onnxruntime_static.py']
onnx_config = dict(
    dynamic_axes={
        'input': {0: 'batch', 2: 'height', 3: 'width'},
        'dets': {0: 'batch', 1: 'num_dets'},
        'labels': {0: 'batch', 1: 'num_dets'},
        'masks': {0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'},
    })
