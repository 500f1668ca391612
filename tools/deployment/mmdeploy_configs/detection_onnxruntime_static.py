# MMDeploy 1.3.1's configs/mmdet/detection/detection_onnxruntime_static.py restated (with its
# configs/mmdet/_base_/base_static.py; open-mmlab/mmdeploy at v1.3.1, values unchanged): the
# whole detector, preprocessed image to `dets` (B, N, 5) and `labels` (B, N), as one ONNX
# graph at the size of the example image. docs/deployment.md, "MMDeploy".
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(output_names=['dets', 'labels'])
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
