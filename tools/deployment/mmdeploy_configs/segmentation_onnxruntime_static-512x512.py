# MMDeploy 1.3.1's configs/mmseg/segmentation_onnxruntime_static-512x512.py restated (with its
# configs/mmseg/segmentation_static.py; open-mmlab/mmdeploy at v1.3.1, values unchanged): the
# segmentor, image to the class map `output` (B, 1, H, W) int64 (resize and argmax in the
# graph), at 512x512 (W, H; for another size set onnx_config.input_shape).
_base_ = ['./_base_/onnxruntime.py']
onnx_config = dict(input_shape=[512, 512])
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
