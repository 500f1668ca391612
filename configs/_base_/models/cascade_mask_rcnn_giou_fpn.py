# MMDetection's Cascade Mask R-CNN + FPN with the box heads of the Swin/ConvNeXt Cascade Mask
# R-CNN results (Swin's detection code; MMDetection's
# convnext/cascade-mask-rcnn_convnext-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop-3x_coco.py): 4 convs
# + 1 fc with SyncBN per stage, boxes decoded and trained with a GIoU loss. The Swin-T numbers
# our configs are compared against come from these heads, not from the base model's Shared2FC
# heads. The backbone is the base's ResNet-50 until a model file replaces it.
_base_ = 'mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py'

model = dict(roi_head=dict(bbox_head=[
    dict(type='ConvFCBBoxHead', num_shared_convs=4, num_shared_fcs=1, in_channels=256,
         conv_out_channels=256, fc_out_channels=1024, roi_feat_size=7, num_classes=80,
         bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                         target_stds=stds),
         reg_class_agnostic=False, reg_decoded_bbox=True,
         norm_cfg=dict(type='SyncBN', requires_grad=True),
         loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
         loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
    # The three stages' regression targets tighten as the IoU thresholds rise (0.5/0.6/0.7).
    for stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1], [0.033, 0.033, 0.067, 0.067])]))
