"""Trained models through the whole-model export (docs/deployment.md, "The check"): equal to
PyTorch detection by detection and on the evaluation's numbers, and run without torch.

A narrow Mask R-CNN (tests/helpers.py's narrow_config: CvT-13's blocks at 16/32/64 widths,
FPN and RoI heads at 32 channels) and a narrow Semantic FPN are trained from random weights on
the demo's shapes data (tools/misc/make_demo_data.py, 64 px, ``--cue tint``) through
tools/train.py, 96 iterations each, long enough to detect and segment shapes (measured
2026-12-07: bbox mAP 0.18, segm mAP 0.26 on 96 px val images; mIoU 28.6 with the shapes
found, against 22.2 for the all-background map of an untrained head), and evaluated with
tools/test.py. Then each is exported with tools/deployment/export_onnx.py (dynamic size)
and

* the same preprocessed val images, at the export size and at another size, give the
  same detections (same class, box IoU >= 0.99, score within 1e-4, mask IoU >= 0.99) and
  class maps (>= 99.9 % of pixels) in ONNX Runtime as in ``model.predict``;
* COCO bbox / segm mAP and mIoU from ONNX Runtime's results, read back to the images
  by tools/deployment/onnx_inference.py, equal tools/test.py's to 0.1 points;
* tools/deployment/onnx_inference.py runs in a process where torch, torchvision, MMCV,
  MMEngine, MMDetection, MMSegmentation, MMPretrain and cvt_mm cannot be imported, on a val
  image and on an image of another size (resized by the stored pipeline), and its detections
  are the model's own on those images, in the images' pixels.

The detection val images are 96 px (the test pipeline's size: no resize) where training
used 64 px, because a dynamic Mask R-CNN graph holds from 67 px (a stride-64 level needs two
cells): the mAP comparison then needs no resizing, which the graph does not hold.
"""
import json
import os
import os.path as osp
import pickle
import re
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import cvt_mm  # noqa: F401  (registers the backbones, patches the stack)

from dumped_metrics import coco_average_precisions, mean_iou, printed_metric
from helpers import ROOT, SEG_CLASSES, SHAPES, load_tool, narrow_config, run_tool, write_user_config

pytestmark = pytest.mark.slow
ITERATIONS = 96
TRAIN_SIDE, DET_VAL_SIDE = 64, 96
# The bar: 0.1 points of mAP (in [0, 1]) and of mIoU (in %).
MAP_TOL, MIOU_TOL = 0.001, 0.1


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    """Training images of 64 px (32 COCO, 16 ADE20K layout, one or two shapes each), the
    ADE20K val split at 64 px (8) and a COCO val split of 96 px images (16)."""
    root = tmp_path_factory.mktemp('onnx_trained_data')
    make = load_tool('misc/make_demo_data').main
    common = ['--imagenet-train', '0', '--imagenet-val', '0', '--max-objects', '2',
              '--cue', 'tint']
    make(['--out', str(root / 'train'), '--size', str(TRAIN_SIDE), '--coco-train', '32',
          '--coco-val', '0', '--ade-train', '16', '--ade-val', '8', '--seed', '1', *common])
    make(['--out', str(root / 'val'), '--size', str(DET_VAL_SIDE), '--coco-train', '0',
          '--coco-val', '16', '--ade-train', '0', '--ade-val', '0', '--seed', '2', *common])
    return root


SCHEDULE = """optim_wrapper = dict(optimizer=dict(lr={lr}))
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=10)]
default_hooks = dict(logger=dict(interval=16))
randomness = dict(seed=0)
"""
DET_VAL = f"""test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=({DET_VAL_SIDE}, {DET_VAL_SIDE}), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))]
val_dataloader = dict(dataset=dict(data_root={{root}}, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file={{root}} + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
"""
FPN_NARROW = """model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64], num_heads=[1, 2, 4],
                            depths=[1, 1, 2])),
    neck=dict(in_channels=[16, 32, 64], out_channels=32),
    decode_head=dict(in_channels=[32, 32, 32], channels=32))
"""


class Trained:
    """A trained run: its config, checkpoint, tools/test.py's dump and output, the export."""

    def __init__(self, config, checkpoint, dump, log, onnx):
        self.config, self.checkpoint, self.dump, self.log, self.onnx = \
            config, checkpoint, dump, log, onnx


PAGE = osp.join(ROOT, 'docs', 'deployment.md')


def page_command(start: str, values: dict) -> list:
    """The words of docs/deployment.md's command that starts with ``start``, each word that
    is a key of ``values`` and each value of an option that is a key replaced by its value:
    the page's command run on this test's model, files and sizes."""
    text = open(PAGE).read()
    for block in re.findall(r'```bash\n(.*?)```', text, re.S):
        for line in block.replace('\\\n', ' ').splitlines():
            if line.startswith(start):
                words = shlex.split(line.split(' #')[0])
                out, i = [], 0
                while i < len(words):
                    word = words[i]
                    if word in values and word.startswith('--'):
                        count = len(values[word])
                        out += [word, *values[word]]
                        i += 1 + count
                        continue
                    out += values.get(word, [word]) if isinstance(values.get(word), list) \
                        else [values.get(word, word)]
                    i += 1
                assert out[:2] == ['python', start.split()[1]], out
                return out[1:]  # the tool's path and its arguments
    raise AssertionError(f'{PAGE} has no command starting {start!r}')


def train_and_export(root, data, kind: str) -> Trained:
    """Train, evaluate with tools/test.py, then export with the page's own command (the
    quick start's, for this kind of model)."""
    work = root / 'work'
    if kind == 'det':
        user = write_user_config(str(root / 'user.py'), 'mask_rcnn_cvt13_coco.py',
                                 str(data / 'train' / 'coco'), str(work), image_size=TRAIN_SIDE,
                                 max_epochs=ITERATIONS * 2 // 32)
        config = narrow_config(user, 'det')
        val_root = str(data / 'val' / 'coco') + '/'
        with open(config, 'a') as f:
            f.write(SCHEDULE.format(lr=1e-3) + DET_VAL.format(root=repr(val_root)))
        page, side = 'configs/mask_rcnn_cvt13_coco.py', DET_VAL_SIDE
    else:
        user = write_user_config(str(root / 'user.py'), 'sem_fpn_cvt13_ade20k.py',
                                 str(data / 'train' / 'ade'), str(work), image_size=TRAIN_SIDE,
                                 max_iters=ITERATIONS)
        config = str(root / 'narrow.py')
        with open(config, 'w') as f:
            f.write(f'_base_ = {user!r}\n' + FPN_NARROW + SCHEDULE.format(lr=4e-3))
        page, side = 'configs/sem_fpn_cvt13_ade20k.py', TRAIN_SIDE
    run_tool(['train.py', config, '--cfg-options', 'val_cfg=None', 'val_dataloader=None',
              'val_evaluator=None'], timeout=900, warm=True)
    checkpoint = (work / 'last_checkpoint').read_text().strip()
    dump = str(root / 'dump.pkl')
    log = run_tool(['test.py', config, checkpoint, '--work-dir', str(root / 'test'), '--out',
                    dump], timeout=600, warm=True)
    onnx = str(root / f'{kind}.onnx')
    command = page_command(f'python tools/deployment/export_onnx.py {page}', {
        page: config, '--shape': [str(side)] * 2, '--out': [onnx]})
    assert command[0] == 'tools/deployment/export_onnx.py' and '--dynamic' in command
    command[2] = checkpoint  # the page's work_dirs/... checkpoint
    exported = run_tool(['deployment/export_onnx.py', *command[1:]], timeout=600, warm=True)
    assert exported.stdout.rstrip().endswith('equal to PyTorch: OK'), exported.stdout[-3000:]
    return Trained(config, checkpoint, dump, log.stdout + log.stderr, onnx)


@pytest.fixture(scope='module')
def trained(data, tmp_path_factory):
    """``trained('det')`` / ``trained('seg')``: the run of that kind, made once."""
    runs = {}

    def get(kind):
        if kind not in runs:
            runs[kind] = train_and_export(tmp_path_factory.mktemp(f'onnx_{kind}'), data, kind)
        return runs[kind]

    return get


def preprocessed(module, images, size):
    """The val ``images`` as the model's data preprocessor makes them, resized to ``size``
    (H, W) first and padded as the preprocessor pads."""
    import torch.nn.functional as F
    pre = module.model.data_preprocessor
    tensors = []
    for path in images:
        image = torch.from_numpy(load_tool('deployment/onnx_inference').read_image(path))
        image = image.permute(2, 0, 1).float()[None]
        image = F.interpolate(image, size=size, mode='bilinear', align_corners=False)
        out = pre(dict(inputs=[image[0].round().clamp(0, 255).byte()]), False)['inputs']
        tensors.append(out)
    return tensors


def val_images(data, kind):
    folder = data / 'val' / 'coco' / 'val2017' if kind == 'det' else \
        data / 'train' / 'ade' / 'images' / 'validation'
    return sorted(str(p) for p in folder.iterdir())


@pytest.mark.parametrize('kind', ['det', 'seg'])
def test_trained_model_equals_pytorch_at_the_export_size_and_another(kind, trained, data):
    """Every val image, preprocessed at the export size and at another one (resized,
    then padded as the data preprocessor pads: 112 x 144 stays, 81 x 73 is padded for the
    detector): ONNX Runtime's results are predict's."""
    import onnxruntime as ort

    from cvt_mm.apis.deployment import build_part
    from cvt_mm.apis.end2end.compare import compare_results, graph_results, reference_results
    from cvt_mm.apis.end2end.models import max_detections
    run = trained(kind)
    session = ort.InferenceSession(run.onnx, providers=['CPUExecutionProvider'])
    export_side = DET_VAL_SIDE if kind == 'det' else TRAIN_SIDE
    images = val_images(data, kind)
    matched = 0
    module, info = build_part(run.config, 'model', run.checkpoint)
    for size in [(export_side, export_side), (112, 144) if kind == 'det' else (81, 73)]:
        for tensor in preprocessed(module, images, size):
            expected = reference_results(module.model, tensor, info['kind'])
            outputs = session.run(None, {'image': tensor.numpy()})
            if kind == 'det':
                assert_unused_rows_are_marked(*outputs, max_detections(module)[0])
            got = graph_results(info['kind'], outputs)
            (row, ) = compare_results(info['kind'], expected, got, 0.05)
            assert row['ok'], (size, tensor.shape, row)
            matched += row.get('matched', 0)
    if kind == 'det':
        assert matched >= 20, matched  # a trained detector finds the shapes


def assert_unused_rows_are_marked(dets, labels, masks, rows):
    """docs/deployment.md's promise: the detections first, highest score first; the rows
    after them score 0 with label -1, a zero box and an empty mask."""
    assert dets.shape[1] == labels.shape[1] == masks.shape[1] == rows  # max_per_img
    for det, label, mask in zip(dets, labels, masks):
        used = label >= 0
        count = int(used.sum())
        assert used[:count].all() and not used[count:].any(), label
        assert (np.diff(det[:count, 4]) <= 0).all() and (det[:count, 4] > 0.05).all()
        assert (det[count:] == 0).all() and (label[count:] == -1).all()
        assert not mask[count:].any()


def ort_dump(run, images, path):
    """onnx_inference.py's results for ``images``, as tools/test.py dumps predictions."""
    from pycocotools import mask as mask_util
    tool = load_tool('deployment/onnx_inference')
    model = tool.Model(run.onnx)
    with open(run.dump, 'rb') as f:
        ids = {osp.basename(r['img_path']): r.get('img_id') for r in pickle.load(f)}
    results = []
    for image in images:
        result = model.predict(tool.read_image(image))
        if 'seg_map' in result:
            results.append(dict(img_path=image, pred_sem_seg=dict(data=result['seg_map'][None])))
            continue
        masks = [mask_util.encode(np.asfortranarray(m.astype(np.uint8))) for m in result['masks']]
        for rle in masks:
            rle['counts'] = rle['counts'].decode()
        results.append(dict(img_id=ids[osp.basename(image)], pred_instances=dict(
            bboxes=result['bboxes'], scores=result['scores'], labels=result['labels'],
            masks=masks)))
    with open(path, 'wb') as f:
        pickle.dump(results, f)
    return path


def test_trained_detector_map_from_onnx_runtime_equals_tools_test(trained, data, tmp_path):
    run = trained('det')
    dump = ort_dump(run, val_images(data, 'det'), str(tmp_path / 'ort.pkl'))
    ann = str(data / 'val' / 'coco' / 'annotations' / 'instances_val2017.json')
    for kind in ('bbox', 'segm'):
        printed = printed_metric(run.log, f'coco/{kind}_mAP')
        expected = coco_average_precisions(run.dump, ann, SHAPES, kind)['mAP']
        assert round(expected, 3) == pytest.approx(printed, abs=1e-9), kind
        got = coco_average_precisions(dump, ann, SHAPES, kind)['mAP']
        print(f'{kind} mAP: tools/test.py {expected:.4f}, ONNX Runtime {got:.4f}')
        assert expected >= 0.05, f'{kind} mAP {expected}: the model detects nothing'
        assert abs(got - expected) <= MAP_TOL, (kind, got, expected)


def test_trained_segmentor_miou_from_onnx_runtime_equals_tools_test(trained, data, tmp_path):
    run = trained('seg')
    images = val_images(data, 'seg')
    dump = ort_dump(run, images, str(tmp_path / 'ort.pkl'))
    ann = str(data / 'train' / 'ade' / 'annotations' / 'validation')
    printed = printed_metric(run.log, 'mIoU')
    expected = mean_iou(run.dump, ann, len(SEG_CLASSES))
    assert round(expected, 2) == pytest.approx(printed, abs=1e-9)
    got = mean_iou(dump, ann, len(SEG_CLASSES))
    print(f'mIoU: tools/test.py {expected:.3f}, ONNX Runtime {got:.3f}')
    assert expected > 25, f'mIoU {expected}: the all-background map scores 22.2'
    assert abs(got - expected) <= MIOU_TOL, (got, expected)


# Modules the inference tool must do without, refused by a finder in that process.
BLOCKED = ('torch', 'torchvision', 'mmcv', 'mmengine', 'mmdet', 'mmseg', 'mmpretrain',
           'cvt_mm')


def run_without_torch(tmp_path, argv, script=None, cwd=None):
    """tools/deployment/onnx_inference.py ``argv`` (or the python file ``script``) in a
    process where ``BLOCKED`` cannot be imported, from ``cwd`` (default ``tmp_path``); it
    prints the blocked modules that were imported anyway, as its last line."""
    blocker = tmp_path / 'blocked'
    blocker.mkdir(exist_ok=True)
    (blocker / 'sitecustomize.py').write_text(textwrap.dedent(f"""\
        import sys
        BLOCKED = {BLOCKED!r}
        class _Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in BLOCKED:
                    raise ImportError(f'{{name}} is not installed here')
        sys.meta_path.insert(0, _Refuse())
        """))
    script = script or osp.join(ROOT, 'tools', 'deployment', 'onnx_inference.py')
    runner = textwrap.dedent(f"""\
        import runpy, sys
        sys.argv = {[script, *argv]!r}
        try:
            runpy.run_path({script!r}, run_name='__main__')
        finally:
            loaded = sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r})
            print('blocked modules loaded:', loaded)
        """)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['PYTHONPATH'] = str(blocker)
    return subprocess.run([sys.executable, '-c', runner], cwd=cwd or tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_inference_tool_runs_without_torch_and_gives_the_models_detections(
        trained, data, tmp_path):
    """A 96 px val image (the pipeline leaves it) and a 64 px training image (the pipeline
    resizes it to 96): the tool's detections above the config's threshold are
    MMDetection's own inference on the image files, boxes in the images' pixels; the
    pictures are drawn at the images' sizes."""
    import cv2
    from mmdet.apis import inference_detector, init_detector

    from cvt_mm.apis.end2end.compare import box_iou
    run = trained('det')
    images = [val_images(data, 'det')[0],
              sorted(str(p) for p in (data / 'train' / 'coco' / 'train2017').iterdir())[0]]
    out = tmp_path / 'json'
    command = page_command('python tools/deployment/onnx_inference.py', {
        'mask_rcnn.onnx': run.onnx, 'data/coco/val2017/000000000139.jpg': images,
        '--out-dir': [str(tmp_path / 'pics')], '--json': [str(out)]})
    proc = run_without_torch(tmp_path, command[1:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert 'blocked modules loaded: []' in proc.stdout
    listed = json.loads(out.read_text())
    assert listed['task'] == 'instance-segmentation' and listed['score_thr'] == 0.05
    model = init_detector(run.config, run.checkpoint, device='cpu')
    compared = 0
    for image in images:
        picture = cv2.imread(listed['images'][image]['picture'])
        assert picture.shape == cv2.imread(image).shape
        expected = inference_detector(model, image).pred_instances
        expected = expected[expected.scores > 0.05]
        found = listed['images'][image]['detections']
        assert len(found) == len(expected), (image, found, expected)
        for det, label, score, box in zip(found, expected.labels, expected.scores,
                                          expected.bboxes):
            assert det['label'] == int(label) and det['name'] == SHAPES[int(label)]
            assert det['score'] == pytest.approx(float(score), abs=1e-4)
            assert box_iou(np.array([det['box']]), box[None].numpy())[0, 0] >= 0.99
            compared += 1
    assert compared >= 2, listed


def page_scripts() -> list:
    """The python blocks of docs/deployment.md's "Running it without torch"."""
    text = open(PAGE).read()
    section = text.split('## Running it without torch', 1)[1].split('\n## ', 1)[0]
    return re.findall(r'```python\n(.*?)```', section, re.S)


def test_the_pages_python_runs_without_torch(trained, data, tmp_path):
    """docs/deployment.md's scripts as written, on the trained detector's file and a val
    image (their names replaced), run from the checkout where torch and the toolboxes
    cannot be imported: the detections printed, then the graph's outputs' shapes."""
    run = trained('det')
    scripts = page_scripts()
    assert len(scripts) == 2
    image = val_images(data, 'det')[0]
    # One process runs both, one after the other, each a script of its own as written.
    path = tmp_path / 'page.py'
    path.write_text('\nprint("--- next script")\n'.join(scripts).replace(
        "'mask_rcnn.onnx'", repr(run.onnx)).replace("'demo.jpg'", repr(image)))
    proc = run_without_torch(tmp_path, [], script=str(path), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith('blocked modules loaded: []')
    first, second = proc.stdout.split('--- next script\n')
    detections = [line.split() for line in first.splitlines()]
    assert detections and all(words[0] in SHAPES for words in detections), first
    rows = int(second.split('(')[1].split(',')[0])
    assert second.splitlines()[0] == f'({rows}, 5) ({rows}, 800, 1344)', second


PREBUILT = osp.join(ROOT, '.venv-prebuilt', 'bin', 'python')


@pytest.mark.skipif(not osp.exists(PREBUILT), reason='no .venv-prebuilt (make env STACK=prebuilt)')
def test_an_opset_18_file_runs_in_the_prebuilt_stacks_onnx_runtime(trained, data, tmp_path):
    """The Semantic FPN exported with the page's --opset 18 (IR version 8): the prebuilt
    stack's ONNX Runtime (1.15, numpy 1) runs it through onnx_inference.py and gives the
    class maps this stack's gives."""
    import onnx
    run = trained('seg')
    model = onnx.load(run.onnx, load_external_data=False)
    assert (model.ir_version, model.opset_import[0].version) == (8, 18)
    images = val_images(data, 'seg')
    out = tmp_path / 'prebuilt.json'
    proc = subprocess.run([PREBUILT, osp.join(ROOT, 'tools', 'deployment', 'onnx_inference.py'),
                           run.onnx, *images, '--out-dir', str(tmp_path / 'pics'), '--json',
                           str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'ONNX Runtime 1.15' in proc.stdout, proc.stdout
    tool = load_tool('deployment/onnx_inference')
    here = tool.Model(run.onnx)
    got = json.loads(out.read_text())['images']
    for image in images:
        expected = tool.to_json(here.predict(tool.read_image(image)), here, here.score_thr)
        assert got[image]['pixels'] == expected['pixels'], image
