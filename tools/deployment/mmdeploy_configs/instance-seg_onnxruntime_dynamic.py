# MMDeploy 1.3.1's configs/mmdet/instance-seg/instance-seg_onnxruntime_dynamic.py restated (its
# configs/mmdet/_base_/base_instance-seg_dynamic.py): the dynamic detection config's axes, and
# `masks` as in instance-seg_onnxruntime_static.py.
_base_ = ['./detection_onnxruntime_dynamic.py']
onnx_config = dict(
    output_names=['dets', 'labels', 'masks'],
    dynamic_axes={'masks': {0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'}})
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
