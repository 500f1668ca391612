# MMDeploy 1.3.1's configs/mmdet/instance-seg/instance-seg_onnxruntime_static.py restated (its
# configs/mmdet/_base_/base_instance-seg_static.py on the detection one): also `masks`, the
# mask head's (B, N, 28, 28) probabilities; MMDeploy's ONNX Runtime model pastes them into the
# image in Python (export_postprocess_mask=False).
_base_ = ['./detection_onnxruntime_static.py']
onnx_config = dict(output_names=['dets', 'labels', 'masks'])
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
