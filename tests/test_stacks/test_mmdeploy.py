"""MMDeploy where it fits: on the stack that pins it (``prebuilt``: torch 2.1.2, mmcv 2.1.0,
mmdet 3.3, mmseg 1.2.2, what MMDeploy's last release, 1.3.1, was built for), MMDeploy's own
deploy configs for ONNX Runtime, static and dynamic (restated in
tools/deployment/mmdeploy_configs/: its wheel ships none), export our Mask R-CNN, RetinaNet and
UperNet configs whole with ``mmdeploy.apis.torch2onnx``, and MMDeploy's ONNX Runtime models
give the PyTorch model's results, on narrow models trained here by tools/train.py until they
find the generated shapes (random weights detect nothing stable).

Both sides take MMDeploy's input path (``task_processor.create_input``: the model config's
test pipeline) and ``test_step``, as ``mmdeploy.apis.inference_model`` runs a backend model,
on the validation images the export saw and, for the dynamic configs, also on an image of
another size (two of them side by side). The test pipeline keeps both sizes, so boxes, masks
and class maps are compared in the images' own pixels.

Where the stack does not pin mmdeploy (``pinned``, ``fork``: torch >= 2.13, on which its
``torch2onnx`` fails, docs/deployment.md "MMDeploy") every test here is skipped, saying so;
where it pins mmdeploy and mmdeploy does not import, they fail.
"""
import copy
import json
import os
import os.path as osp
import re

import numpy as np
import pytest
import torch
from PIL import Image
from test_stack_check import this_stack

import cvt_mm  # noqa: F401  (registers everywhere it can)
from cvt_mm.apis.end2end.compare import PIXELS, box_iou, match_detections
from cvt_mm.apis.stacks import parse_requirements

from helpers import (
    ROOT,
    STACKS,
    det_user_config,
    load_tool,
    narrow_config,
    seg_user_config,
)

pytestmark = [pytest.mark.stack, pytest.mark.slow]

DEPLOY_CONFIGS = osp.join(ROOT, 'tools', 'deployment', 'mmdeploy_configs')
DOC = osp.join(ROOT, 'docs', 'deployment.md')
SIDE = 96  # the generated images' side; the other size is two of them side by side

# Each detection above its model's floor must find one of the same class in the other runtime
# (cvt_mm.apis.end2end.compare.match_detections: box IoU >= 0.99, score within 1e-4, mask IoU
# >= 0.99, issue 69's bar for our own export), both ways. The floors keep out what
# MMDeploy's rewrites of MMDetection's post-processing change by design:
# * Mask R-CNN, 0.5: MMDeploy's RoI head keeps one box per RoI, its top class's, for every
#   class (mmdeploy/codebase/mmdet/models/roi_heads/bbox_head.py, "only keep boxes with the max
#   scores"); MMDetection's keeps each class's own regression. A class above 0.5 of a RoI's
#   softmax is its top class: above 0.5 both keep the same box; below, a detection of a RoI's
#   second class has the same score and another box.
# * RetinaNet, 0.3: before NMS each level keeps its `nms_pre` (1000) best candidates, counted
#   as anchor-class pairs above score_thr by MMDetection, as anchors (with all their classes) by
#   MMDeploy (mmdeploy/codebase/mmdet/models/dense_heads/base_dense_head.py), so where a level
#   has more than 1000 such pairs MMDeploy keeps low-scoring ones MMDetection drops (on these
#   briefly trained models, up to 0.12).
SCORE_FLOOR = dict(mask_rcnn=0.5, retinanet=0.3)
# A trained model finds a ground-truth object (its class, box IoU >= 0.5) with a detection
# scoring at least this (untrained, Mask R-CNN's softmax over the 3 classes and background
# gives about 0.25; RetinaNet's sigmoid starts at its prior, 0.01).
TRAINED_SCORE = dict(mask_rcnn=0.5, retinanet=0.3)


# The narrow models (tests/helpers.py) from random weights on the tinted shapes, AdamW at a
# constant learning rate (no warm-up), no validation; the test pipeline keeps both test
# sizes (SIDE x SIDE and SIDE x 2 SIDE) as they are.
TRAIN = """\
_base_ = {base!r}
{model}
val_cfg = None
val_dataloader = None
val_evaluator = None
param_scheduler = None
optim_wrapper = dict(optimizer=dict(lr={lr}), clip_grad=dict(max_norm=10))
default_hooks = dict(logger=dict(interval=10))
randomness = dict(seed=0)
test_pipeline = [
    *_base_.test_pipeline[:1],
    dict(type='Resize', scale=({long}, {side}), keep_ratio=True),
    *_base_.test_pipeline[2:]]
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
"""
# RetinaNet narrowed as tests/helpers.py narrows Mask R-CNN: the same CvT, FPN and head,
# 32 channels.
NARROW_RETINANET = """model = dict(
    backbone=dict(arch=dict(_delete_=True, embed_dims=[16, 32, 64], num_heads=[1, 2, 4],
                            depths=[1, 1, 2])),
    neck=dict(in_channels=[32, 64], out_channels=32),
    bbox_head=dict(in_channels=32, feat_channels=32))"""
# MMDeploy's RPN runs one NMS over all levels' proposals and drops those under 0.05
# objectness (mmdeploy/codebase/mmdet/models/dense_heads/rpn_head.py); MMDetection 3's runs it
# per level (batched by level) and keeps them. Other proposals, other detections, confident
# ones too (docs/deployment.md, "MMDeploy"). The test's RPN suppresses and thresholds nothing,
# so both keep the same 50 best-scoring proposals, and the rest is compared.
RPN_ALIKE = 'model = dict(test_cfg=dict(rpn=dict(score_thr=0.0, nms=dict(iou_threshold=1.0))))'
# name: (toolbox, config, narrowing, epochs (detection, 4 iterations each) or iterations,
# learning rate, test-time settings)
MODELS = {
    'mask_rcnn': ('det', 'mask_rcnn_cvt13_coco.py', 'det', 12, 1e-3, RPN_ALIKE),
    'retinanet': ('det', 'retinanet_cvt13_coco.py', NARROW_RETINANET, 40, 1e-3, ''),
    'upernet': ('seg', 'upernet_cvt13_ade20k.py', 'seg', 100, 1e-3, ''),
}


def case(model: str, deploy_config: str):
    # One xdist worker per model: it trains the model once for both of its cases.
    return pytest.param(model, deploy_config, id=f'{model}-{deploy_config[:-3]}',
                        marks=pytest.mark.xdist_group(f'mmdeploy_{model}'))


CASES = [
    case('mask_rcnn', 'instance-seg_onnxruntime_static.py'),
    case('mask_rcnn', 'instance-seg_onnxruntime_dynamic.py'),
    case('retinanet', 'detection_onnxruntime_static.py'),
    case('retinanet', 'detection_onnxruntime_dynamic.py'),
    case('upernet', 'segmentation_onnxruntime_static-512x512.py'),
    case('upernet', 'segmentation_onnxruntime_dynamic.py'),
]


@pytest.fixture(scope='module')
def mmdeploy():
    """``mmdeploy.apis`` where this stack pins mmdeploy; skipped where it does not."""
    stack = this_stack()
    requirements = STACKS[stack].requirements
    with open(osp.join(ROOT, requirements)) as f:
        pinned = 'mmdeploy' in parse_requirements(f)
    if not pinned:
        pytest.skip(f'stack {stack!r} does not carry MMDeploy ({requirements} pins none): its '
                    'last release, 1.3.1, is built for torch 2.1 (stack "prebuilt"); tried on '
                    'the pinned stack\'s torch 2.13, its torch2onnx fails (docs/deployment.md, '
                    '"MMDeploy")')
    try:
        import mmdeploy.apis
    except ImportError as error:
        pytest.fail(f'stack {stack!r} pins mmdeploy ({requirements}), but it does not import: '
                    f'{error}; `make env STACK={stack}` installs it')
    return mmdeploy.apis


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    out = str(tmp_path_factory.mktemp('mmdeploy_data'))
    load_tool('misc/make_demo_data').main([
        '--out', out, '--size', str(SIDE), '--coco-train', '8', '--coco-val', '1',
        '--ade-train', '8', '--ade-val', '1', '--max-objects', '3', '--seed', '2'])
    return out


_trained = {}


@pytest.fixture(scope='module')
def trained(data, tmp_path_factory):
    """``trained(name) -> (config, checkpoint)``: MODELS[name] trained by tools/train.py in
    this process, once."""
    def train(name: str):
        if name not in _trained:
            toolbox, base, narrow, length, lr, at_test = MODELS[name]
            root = tmp_path_factory.mktemp(name)
            work, user = str(root / 'work'), str(root / 'user.py')
            if toolbox == 'det':
                user = det_user_config(user, base, osp.join(data, 'coco'), work,
                                       max_epochs=length)
            else:
                user = seg_user_config(user, osp.join(data, 'ade'), work, max_iters=length,
                                       base=base)
            custom = narrow not in ('det', 'seg')
            if not custom:
                user = narrow_config(user, narrow)
            config = str(root / f'{name}.py')
            with open(config, 'w') as f:
                f.write(TRAIN.format(base=user, model=narrow if custom else '', lr=lr,
                                     side=SIDE, long=2 * SIDE) + at_test + '\n')
            load_tool('train').main([config])
            checkpoint = f'epoch_{length}.pth' if toolbox == 'det' else f'iter_{length}.pth'
            _trained[name] = (config, osp.join(work, checkpoint))
        return _trained[name]
    return train


def comparison_images(data: str, toolbox: str, dynamic: bool) -> list:
    """``[(path, ground truth)]``: two training images of the toolbox's layout (the narrow
    models, trained briefly on eight, detect those surely; two unseen ones less so) and, for a
    dynamic graph, both side by side. Ground truth: ``[(class, x1, y1, x2, y2)]`` (detection)
    or the label map (segmentation, ADE's values: 0 unlabelled, k + 1 class k)."""
    if toolbox == 'det':
        with open(osp.join(data, 'coco', 'annotations', 'instances_train2017.json')) as f:
            coco = json.load(f)
        images = []
        for image in coco['images'][:2]:
            boxes = [(a['category_id'] - 1, a['bbox'][0], a['bbox'][1],
                      a['bbox'][0] + a['bbox'][2], a['bbox'][1] + a['bbox'][3])
                     for a in coco['annotations'] if a['image_id'] == image['id']]
            images.append((osp.join(data, 'coco', 'train2017', image['file_name']), boxes))
    else:
        folder = osp.join(data, 'ade', 'images', 'training')
        images = [(osp.join(folder, name), np.asarray(Image.open(
            osp.join(data, 'ade', 'annotations', 'training', name[:-4] + '.png'))))
            for name in sorted(os.listdir(folder))[:2]]
    if dynamic:
        pixels = np.concatenate([np.asarray(Image.open(p).convert('RGB')) for p, _ in images],
                                axis=1)
        path = osp.join(data, f'wide_{toolbox}.png')  # lossless: the same pixels as the two
        Image.fromarray(pixels).save(path)
        truth = ([(c, x1 + SIDE * i, y1, x2 + SIDE * i, y2)
                  for i, (_, boxes) in enumerate(images) for c, x1, y1, x2, y2 in boxes]
                 if toolbox == 'det' else np.concatenate([t for _, t in images], axis=1))
        images.append((path, truth))
    return images


def as_numpy(sample) -> dict:
    fields = sample.pred_instances
    return {k: fields[k].numpy() for k in ('bboxes', 'scores', 'labels', 'masks') if k in fields}


def found_objects(result, truth: list, trained_score: float) -> int:
    """How many ground-truth objects a detection of their class scoring >= ``trained_score``
    finds (box IoU >= 0.5)."""
    found = as_numpy(result)
    confident = found['scores'] >= trained_score
    hits = 0
    for c, *box in truth:
        ious = box_iou(np.array([box]), found['bboxes'])[0]
        hits += bool(((ious >= 0.5) & confident & (found['labels'] == c)).any())
    return hits


def check_detections(name: str, torch_result, ort_result, floor: float) -> None:
    """Every detection above ``floor`` matched one to one, both ways, as our own export's
    check matches them."""
    stats = match_detections(as_numpy(torch_result), as_numpy(ort_result), floor)
    assert not stats['failures'], f'{name}: ' + '; '.join(stats['failures'])


def check_class_map(name: str, torch_result, ort_result, truth: np.ndarray) -> None:
    found = torch_result.pred_sem_seg.data[0].numpy()
    ort = ort_result.pred_sem_seg.data[0].numpy()
    assert found.shape == ort.shape == truth.shape, (found.shape, ort.shape, truth.shape)
    # Trained: most labelled pixels right, and every class of the image found somewhere.
    labelled = truth > 0
    accuracy = (found[labelled] == truth[labelled] - 1).mean()
    assert accuracy >= 0.8, f'{name}: not trained, pixel accuracy {accuracy:.3f}'
    assert set(np.unique(truth[labelled]) - 1) <= set(np.unique(found)), name
    equal = (found == ort).mean()
    assert equal >= PIXELS, f'{name}: ONNX Runtime\'s class map equals PyTorch\'s on ' \
                                  f'{equal:.4%} of the pixels'


def pooling_fixed_windows(model, export_side: int):
    """A copy of the UperNet ``model`` whose pyramid pooling averages, at every size, the
    fixed windows it averages at an export size of ``export_side`` pixels: what MMDeploy's
    graph does. MMDeploy replaces adaptive average pooling to more than one cell by
    ``avg_pool2d`` with a kernel (and stride) of ``int(side / cells)``, computed from the
    example input and fixed in the graph (mmdeploy/pytorch/functions/adaptive_pool.py); here
    on the stride-16 map, where UperNet's pooling runs (CvT's last level)."""
    model = copy.deepcopy(model)
    cells = export_side // 16
    for branch in model.decode_head.psp_modules:
        scale = branch[0].output_size
        scale = scale if isinstance(scale, int) else scale[0]
        if scale > 1:  # one cell stays a global average (MMDeploy keeps it)
            branch[0] = torch.nn.AvgPool2d(cells // scale, cells // scale)
    return model


@pytest.mark.parametrize('model,deploy_config', CASES)
def test_mmdeploy_s_onnx_runtime_model_gives_pytorch_s_results(model, deploy_config, mmdeploy,
                                                              trained, data, tmp_path):
    """...at the export size and, dynamic, at another; a dynamic UperNet gives there what
    UperNet gives pooling the export size's windows (:func:`pooling_fixed_windows`)."""
    from mmdeploy.utils import get_input_shape, load_config
    toolbox = MODELS[model][0]
    config, checkpoint = trained(model)
    deploy = osp.join(DEPLOY_CONFIGS, deploy_config)
    deploy_cfg, model_cfg = load_config(deploy, config)
    dynamic = 'dynamic' in deploy_config
    if 'static-512x512' in deploy_config:
        # MMDeploy's static segmentation config fixes ADE20K's crop, 512 x 512; a model of
        # other images sets its own size, as a user does.
        deploy_cfg.onnx_config.input_shape = [SIDE, SIDE]
    images = comparison_images(data, toolbox, dynamic)
    mmdeploy.torch2onnx(images[0][0], str(tmp_path), 'end2end.onnx', deploy_cfg, model_cfg,
                        checkpoint, 'cpu')
    onnx_file = str(tmp_path / 'end2end.onnx')

    task = mmdeploy.build_task_processor(model_cfg, deploy_cfg, 'cpu')
    ort_model = task.build_backend_model([onnx_file], task.update_data_preprocessor)
    torch_model = task.build_pytorch_model(checkpoint)
    objects = 0
    for path, truth in images:
        inputs, _ = task.create_input(path, get_input_shape(deploy_cfg))
        reference = torch_model
        if toolbox == 'seg' and np.shape(truth)[1] != SIDE:  # another size than the export's
            reference = pooling_fixed_windows(torch_model, SIDE)
        with torch.no_grad():
            (found, ), (ort, ) = reference.test_step(inputs), ort_model.test_step(inputs)
        name = f'{model} {deploy_config} {osp.basename(path)}'
        if toolbox == 'det':
            objects += found_objects(found, truth, TRAINED_SCORE[model])
            check_detections(name, found, ort, SCORE_FLOOR[model])
        else:
            check_class_map(name, found, ort, truth)
    if toolbox == 'det':  # trained (so there is something above the floor to compare)
        assert objects >= 1, f'{model}: no object found by a detection scoring >= ' \
                             f'{TRAINED_SCORE[model]}: not trained'


def docs_script() -> str:
    """The python block of docs/deployment.md's "MMDeploy" section."""
    with open(DOC) as f:
        section = f.read().split('\n## MMDeploy\n', 1)[1].split('\n## ', 1)[0]
    (block, ) = re.findall(r'```python\n(.*?)```', section, re.S)
    return block


@pytest.mark.xdist_group('mmdeploy_mask_rcnn')
def test_the_docs_mmdeploy_script_runs_as_written(mmdeploy, trained, data, tmp_path):
    """docs/deployment.md's MMDeploy script as a user runs it from the checkout, with the
    trained Mask R-CNN's config and checkpoint and an image in place of the page's: its
    ``result`` is PyTorch's, as in the test above."""
    from mmdeploy.utils import load_config
    config, checkpoint = trained('mask_rcnn')
    image = comparison_images(data, 'det', False)[0][0]
    script = docs_script()
    for name, value in dict(model_cfg=config, checkpoint=checkpoint, image=image).items():
        script, found = re.subn(rf"^{name} = '[^']*'$", f'{name} = {value!r}', script,
                                flags=re.M)
        assert found == 1, f'the page\'s script sets no {name} = \'...\''
    script = script.replace("'tools/", repr(osp.join(ROOT, 'tools', ''))[:-1])
    script = script.replace("'work_dirs/mmdeploy", repr(str(tmp_path))[:-1])
    namespace = {}
    exec(compile(script, DOC, 'exec'), namespace)

    deploy_cfg, model_cfg = load_config(namespace['deploy_cfg'], config)
    task = mmdeploy.build_task_processor(model_cfg, deploy_cfg, 'cpu')
    inputs, _ = task.create_input(image, None)
    with torch.no_grad():
        (found, ) = task.build_pytorch_model(checkpoint).test_step(inputs)
    assert found.pred_instances.scores.max() >= SCORE_FLOOR['mask_rcnn']
    check_detections('the docs\' script', found, namespace['result'], SCORE_FLOOR['mask_rcnn'])
