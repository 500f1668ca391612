"""Bad input to the whole-model export and to the inference tool (docs/deployment.md,
"Errors"): each is refused with a message naming the file or stage and what is expected,
and the export writes nothing. No model is traced here: the refusals come first."""
import json
import os.path as osp

import numpy as np
import pytest

import cvt_mm  # noqa: F401  (registers the backbones, patches the stack)

from helpers import CONFIGS, SHAPES, load_tool

onnx = pytest.importorskip('onnx', reason='the deploy extra: pip install -e .[deploy]')
pytest.importorskip('onnxruntime', reason='the deploy extra: pip install -e .[deploy]')


# CvT-13's blocks at a quarter of its widths, one or two a stage: the refusals are the same
# at any width, and a narrow model builds in a fraction of a second.
NARROW = dict(
    mask_rcnn="""model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64],
    num_heads=[1, 2, 4], depths=[1, 1, 2])), neck=dict(in_channels=[16, 32, 64]))\n""",
    upernet="""model = dict(backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64],
    num_heads=[1, 2, 4], depths=[1, 1, 2])), decode_head=dict(in_channels=[16, 32, 64]),
    auxiliary_head=dict(in_channels=64))\n""")


def user_config(tmp_path, base: str, text: str = '') -> str:
    """A user's config of ``configs/<base>``: random weights, the narrow backbone, then
    ``text``; each ``model = dict(...)`` in a file of its own inheriting the one before, as
    a later assignment in the same file would replace the model, not merge into it."""
    parts = ['model = dict(backbone=dict(init_cfg=None))\n', NARROW.get(base.split('_cvt')[0], ''),
             text]
    parent = osp.join(CONFIGS, base)
    for i, part in enumerate(parts):
        path = tmp_path / f'user{i}.py'
        path.write_text(f'_base_ = {parent!r}\n{part}')
        parent = str(path)
    return parent


# --------------------------------------------------------------------------- export
@pytest.mark.parametrize('base,text,message', [
    ('dino_4scale_cvt13_12e_coco.py', '', 'DINO'),
    ('mask_rcnn_cvt13_coco.py', "model = dict(test_cfg=dict(rcnn=dict(nms=dict("
     "type='soft_nms', iou_threshold=0.5))))\n", "R-CNN: NMS {'type': 'soft_nms'"),
    ('upernet_cvt13_ade20k.py', "model = dict(test_cfg=dict(mode='slide', crop_size=(64, 64),"
     " stride=(32, 32)))\n", "segmentor test_cfg.mode='slide'"),
])
def test_a_stage_that_cannot_export_stops_the_tool_before_anything_is_written(
        base, text, message, tmp_path, capsys):
    export = load_tool('deployment/export_onnx')
    out = tmp_path / 'model.onnx'
    code = export.main([user_config(tmp_path, base, text), '--shape', '64', '--out', str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert 'does not export' in err and message in err and 'Nothing was written' in err, err
    assert '--part ' in err  # what exports instead


def test_dataset_and_head_class_counts_that_differ_are_refused(tmp_path, capsys):
    """A user config that changed the head's num_classes and not the dataset's classes."""
    export = load_tool('deployment/export_onnx')
    config = user_config(tmp_path, 'mask_rcnn_cvt13_coco.py', "model = dict(roi_head=dict("
                         "bbox_head=dict(num_classes=3), mask_head=dict(num_classes=3)))\n")
    with pytest.raises(SystemExit) as e:
        export.main([config, '--shape', '64', '--out', str(tmp_path / 'x.onnx')])
    assert 'the test dataset has 80 classes (person, bicycle' in str(e.value)
    assert "head predicts num_classes=3" in str(e.value)
    assert not (tmp_path / 'x.onnx').exists()


def test_a_graph_with_a_custom_operator_is_reported():
    """non_standard_ops finds a node outside ONNX's standard domain (what would need a
    plugin), as export_onnx checks every graph before writing it."""
    import onnx_ir
    from onnx import helper

    from cvt_mm.apis.deployment import non_standard_ops
    node = helper.make_node('NMSRotated', ['x'], ['y'], domain='mmdeploy')
    graph = helper.make_graph(
        [node, helper.make_node('Relu', ['y'], ['z'])], 'g',
        [helper.make_tensor_value_info('x', onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info('z', onnx.TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18),
                                                    helper.make_opsetid('mmdeploy', 1)])
    assert non_standard_ops(onnx_ir.from_proto(model)) == ['mmdeploy::NMSRotated']


# --------------------------------------------------------------------------- inference
def tiny_model(path, task='classification', classes=SHAPES, logits=3, metadata=True):
    """A one-node graph with the metadata export_onnx writes: image (1, 3, 8, 8) in, its
    per-channel means (classification: ``logits`` values) out."""
    from onnx import TensorProto, helper
    if task == 'classification':
        nodes = [helper.make_node('ReduceMean', ['image', 'axes'], ['m'], keepdims=0),
                 helper.make_node('Slice', ['m', 's', 'e', 'a'], ['logits'])]
        out = helper.make_tensor_value_info('logits', TensorProto.FLOAT, [1, logits])
        init = [helper.make_tensor('axes', TensorProto.INT64, [2], [2, 3]),
                helper.make_tensor('s', TensorProto.INT64, [1], [0]),
                helper.make_tensor('e', TensorProto.INT64, [1], [logits]),
                helper.make_tensor('a', TensorProto.INT64, [1], [1])]
    else:  # a detector's two outputs, label 7 in every row
        nodes = [helper.make_node('ReduceMean', ['image', 'axes'], ['m'], keepdims=0),
                 helper.make_node('Concat', ['m', 'm'], ['d'], axis=1),
                 helper.make_node('Slice', ['d', 's', 'e', 'a'], ['f']),
                 helper.make_node('Unsqueeze', ['f', 'a'], ['dets']),
                 helper.make_node('Constant', [], ['labels'], value=helper.make_tensor(
                     'l', TensorProto.INT64, [1, 1], [7]))]
        out = [helper.make_tensor_value_info('dets', TensorProto.FLOAT, [1, 1, 5]),
               helper.make_tensor_value_info('labels', TensorProto.INT64, [1, 1])]
        init = [helper.make_tensor('axes', TensorProto.INT64, [2], [2, 3]),
                helper.make_tensor('s', TensorProto.INT64, [1], [0]),
                helper.make_tensor('e', TensorProto.INT64, [1], [5]),
                helper.make_tensor('a', TensorProto.INT64, [1], [1])]
    graph = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info(
        'image', TensorProto.FLOAT, [1, 3, 8, 8])], out if isinstance(out, list) else [out],
        initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)])
    if metadata:
        for key, value in {'cvt_mm.format': '1', 'cvt_mm.task': task,
                           'cvt_mm.classes': json.dumps(list(classes)),
                           'cvt_mm.preprocess': json.dumps(dict(mean=[0, 0, 0], std=[1, 1, 1],
                                                                bgr_to_rgb=True)),
                           'cvt_mm.pipeline': '[]'}.items():
            model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return str(path)


def test_the_inference_tool_runs_a_file_with_our_metadata(tmp_path, capsys):
    """The tiny classifier: the tool reads the image, runs, lists the top classes."""
    import cv2
    tool = load_tool('deployment/onnx_inference')
    image = tmp_path / 'im.png'
    cv2.imwrite(str(image), np.full((8, 8, 3), (10, 20, 30), np.uint8))  # BGR
    code = tool.main([tiny_model(tmp_path / 'm.onnx'), str(image), '--out-dir',
                      str(tmp_path / 'out'), '--json', str(tmp_path / 'r.json')])
    assert code == 0, capsys.readouterr()
    top = json.loads((tmp_path / 'r.json').read_text())['images'][str(image)]['top5']
    assert [name for name, _ in top] == ['circle', 'square', 'triangle']  # RGB means 30 > 20 > 10
    assert (tmp_path / 'out' / 'im.jpg').exists()


@pytest.mark.parametrize('case,message', [
    ('unreadable', 'im.jpg: OpenCV cannot decode it (expected an image file'),
    ('missing image', 'nowhere.jpg: no such file'),
    ('no metadata', 'no cvt_mm metadata of a whole model (expected cvt_mm.format=1'),
    ('not onnx', 'm.onnx: ONNX Runtime cannot load it'),
    ('class count', 'the graph gives 3 logits but its metadata lists 2 classes'),
    ('label', 'the graph gives label 7 but its metadata lists 3 classes'),
])
def test_the_inference_tool_refuses_bad_input_naming_the_file(case, message, tmp_path, capsys):
    import cv2
    tool = load_tool('deployment/onnx_inference')
    image = tmp_path / 'im.jpg'
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    model = tmp_path / 'm.onnx'
    if case == 'unreadable':
        image.write_text('not an image')
    if case == 'not onnx':
        model.write_text('not a model')
    else:
        tiny_model(model, task='detection' if case == 'label' else 'classification',
                   classes=SHAPES[:2] if case == 'class count' else SHAPES,
                   metadata=case != 'no metadata')
    images = [str(tmp_path / 'nowhere.jpg')] if case == 'missing image' else [str(image)]
    assert tool.main([str(model), *images, '--out-dir', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and message in err, err


def test_without_torch_s_exporter_the_tool_says_where_to_go(tmp_path, monkeypatch, capsys):
    """On torch < 2.5 (the prebuilt stack's 2.1: cvt_mm.compat's ``onnx_dynamo_export`` is
    False there) the tool stops before building anything, pointing to MMDeploy."""
    export = load_tool('deployment/export_onnx')
    monkeypatch.setattr(export, 'has', lambda feature: feature != 'onnx_dynamo_export')
    out = tmp_path / 'x.onnx'
    code = export.main([osp.join(CONFIGS, 'mask_rcnn_cvt13_coco.py'), '--shape', '64',
                        '--out', str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert 'needs torch >= 2.5 (torch.onnx.export(dynamo=True))' in err
    assert 'export with MMDeploy 1.3.1: docs/deployment.md, "MMDeploy"' in err
