# MMDeploy 1.3.1's deploy config of the same name, restated: its pip wheel ships no configs
# (they live in its repository, open-mmlab/mmdeploy at v1.3.1:
# configs/mmdet/detection/detection_onnxruntime_static.py, which inherits
# configs/mmdet/_base_/base_static.py, configs/_base_/onnx_config.py and
# configs/_base_/backends/onnxruntime.py; the values below are theirs, unchanged).
# The whole detector, pre-processed image to `dets` (B, N, 5) and `labels` (B, N), as one
# ONNX graph at the size of the example image. docs/deployment.md, "MMDeploy".
onnx_config = dict(
    type='onnx',
    export_params=True,
    keep_initializers_as_inputs=False,
    opset_version=11,
    save_file='end2end.onnx',
    input_names=['input'],
    output_names=['dets', 'labels'],
    input_shape=None,
    optimize=True)
codebase_config = dict(
    type='mmdet',
    task='ObjectDetection',
    model_type='end2end',
    post_processing=dict(
        score_threshold=0.05,
        confidence_threshold=0.005,  # for YOLOv3
        iou_threshold=0.5,
        max_output_boxes_per_class=200,
        pre_top_k=5000,
        keep_top_k=100,
        background_label_id=-1,
    ))
backend_config = dict(type='onnxruntime')
