# TensorBoard logging for any config of this project (detection, segmentation, classification):
# MMEngine's TensorboardVisBackend writes event files next to the LocalVisBackend's
# scalars.json (WORK_DIR/<timestamp>/vis_data/), so tools/analysis_tools/plot_curves.py keeps
# working. Needs the `tensorboard` package: pip install -e ".[tensorboard]". docs/curves.md.
#
# Add this file to your config's _base_ and point the visualizer at the list:
#
#     _base_ = ['configs/mask_rcnn_cvt13_coco.py', 'configs/_base_/tensorboard.py']
#     visualizer = dict(vis_backends=_base_.tensorboard_vis_backends)
#
# Why the second line: MMEngine refuses a key defined by two files of one _base_ list
# ("Duplicate key is not allowed among bases"), and every model config already defines
# `visualizer` (its toolbox's DetLocalVisualizer / SegLocalVisualizer / UniversalVisualizer,
# whose type must be kept). So this file only names the backends under a key of its own.
tensorboard_vis_backends = [
    dict(type='LocalVisBackend'),
    dict(type='TensorboardVisBackend'),
]
