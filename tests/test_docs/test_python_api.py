"""docs/python_api.md runs as written: each python block of the page is a user's script, run
by a Python process of its own in a folder outside the checkout that holds what the scripts
name (``demo.jpg``, checkpoints of our configs under ``work_dirs/``), with ``/path/to/cvt_mm``
being this repository. What the scripts return and write is checked; the script that uses the
three toolboxes in one process must predict exactly what each inferencer predicts alone.

Without ``cvt_mm``, the toolboxes collide in one process (MMPretrain's inferencer after
MMDetection's): that, and the page's way around it, are checked with the toolboxes' own
configs.
"""
import json
import os
import os.path as osp
import pickle
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import ROOT, make_tiny_data, write_checkpoint

# End-to-end runs of the real inferencers: left out by `make test-fast`.
pytestmark = pytest.mark.slow

DOC = osp.join(ROOT, 'docs', 'python_api.md')
PLACEHOLDER = '/path/to/cvt_mm'
# What each block of the page predicts, by the inferencers it builds.
OUTPUTS = {'det': ('detections', ), 'seg': ('label_map', ), 'cls': ('classification', ),
           'all': ('detections', 'label_map', 'classification')}
INFERENCERS = {'det': 'DetInferencer(', 'seg': 'MMSegInferencer(',
               'cls': 'ImageClassificationInferencer('}
IMAGE_HEIGHT, IMAGE_WIDTH = 96, 128  # not square, so that height and width cannot swap
# Classes the detection checkpoint prefers (a random classifier scores every class about
# 1/81, under the config's score threshold of 0.05: nothing would be detected).
FAVOURED = (0, 5)


def page_scripts() -> dict:
    """``{'det' | 'seg' | 'cls' | 'all': script}``: the python blocks of the page, by the
    inferencers each one builds."""
    with open(DOC) as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    scripts = {}
    for block in blocks:
        built = [key for key, call in INFERENCERS.items() if call in block]
        scripts['all' if len(built) == 3 else built[0]] = block
    assert len(scripts) == len(blocks) == 4, list(scripts)
    return scripts


@pytest.fixture(scope='module')
def user_dir(tmp_path_factory):
    """A folder of a user's project, outside the checkout: an image and the checkpoints the
    page's scripts name, of our configs (random weights; the class names and palette of
    COCO, ADE20K and ImageNet in their meta, as training writes them)."""
    root = tmp_path_factory.mktemp('user')
    assert not str(root).startswith(ROOT)
    data = make_tiny_data(str(tmp_path_factory.mktemp('data')))
    val = osp.join(data, 'coco', 'val2017')
    image = Image.open(osp.join(val, sorted(os.listdir(val))[0]))
    image.resize((IMAGE_WIDTH, IMAGE_HEIGHT)).save(root / 'demo.jpg')
    configs = osp.join(ROOT, 'configs')
    bias = torch.zeros(81)
    bias[list(FAVOURED)] = 6.0
    write_checkpoint(osp.join(configs, 'mask_rcnn_cvt13_coco.py'),
                     str(root / 'work_dirs' / 'mask_rcnn_cvt13_coco' / 'epoch_12.pth'),
                     state_dict={'roi_head.bbox_head.fc_cls.bias': bias})
    write_checkpoint(osp.join(configs, 'upernet_cvt13_ade20k.py'),
                     str(root / 'work_dirs' / 'upernet_cvt13_ade20k' / 'iter_160000.pth'))
    write_checkpoint(osp.join(configs, 'imagenet_cvt13_300e_in1k.py'),
                     str(root / 'work_dirs' / 'imagenet_cvt13_300e_in1k' / 'epoch_300.pth'))
    return root


def run_script(code: str, cwd, outputs=(), timeout: float = 600) -> dict:
    """Run ``code`` as a script of its own in ``cwd`` (cvt_mm importable, as installed), then
    return its variables named in ``outputs``."""
    dump = textwrap.dedent(f'''
        import pickle as _pickle
        with open('_outputs.pkl', 'wb') as _f:
            _pickle.dump({{_k: globals()[_k] for _k in {tuple(outputs)!r}}}, _f)
        ''')
    script = osp.join(cwd, '_script.py')
    with open(script, 'w') as f:
        f.write(code + dump)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f'{code}\nfailed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}'
    with open(osp.join(cwd, '_outputs.pkl'), 'rb') as f:
        return pickle.load(f)


@pytest.fixture(scope='module')
def page_runs(user_dir, tmp_path_factory):
    """``page_runs(key)``: the outputs of the page's script ``key``, run in a copy of the user
    folder of its own (so that each script's ``outputs/`` are its alone)."""
    done = {}

    def run(key):
        if key not in done:
            cwd = tmp_path_factory.mktemp(f'run_{key}')
            for name in ('demo.jpg', 'work_dirs'):
                os.symlink(user_dir / name, cwd / name)
            script = page_scripts()[key].replace(PLACEHOLDER, ROOT)
            done[key] = (run_script(script, str(cwd), OUTPUTS[key]), cwd)
        return done[key]

    return run


def test_the_page_scripts_are_users_scripts():
    """They name our configs through the placeholder path and import cvt_mm before any
    toolbox (beside transformers 5, the suite's, the toolboxes' models import only after it).
    Every script calls ``cvt_mm.setup_process()`` before its inferencers read a checkpoint
    (safe loading of what training writes; MMPretrain's scope), which the import alone does
    not."""
    for key, script in page_scripts().items():
        assert f"configs = '{PLACEHOLDER}/configs'" in script, key
        assert script.startswith('import cvt_mm'), key
        assert script.index('cvt_mm.setup_process()') < script.index('Inferencer('), key
    # The script with the three toolboxes builds MMPretrain's after the two others: the order
    # that fails without cvt_mm.
    script = page_scripts()['all']
    assert script.index('ImageClassificationInferencer(') > max(
        script.index('MMSegInferencer('), script.index('DetInferencer('))


def test_detection_script(page_runs):
    outputs, cwd = page_runs('det')
    detections = outputs['detections']
    assert set(detections) == {'labels', 'scores', 'bboxes', 'masks'}
    count = len(detections['labels'])
    assert 0 < count <= 100  # the config's test_cfg.rcnn.max_per_img
    assert all(len(detections[key]) == count for key in detections)
    assert set(detections['labels']) <= set(FAVOURED)
    scores = detections['scores']
    assert scores == sorted(scores, reverse=True) and all(0.05 <= s <= 1 for s in scores)
    boxes = np.array(detections['bboxes'])
    assert boxes.shape == (count, 4)
    assert (boxes[:, 0] <= boxes[:, 2]).all() and (boxes[:, 1] <= boxes[:, 3]).all()
    assert boxes.min() >= 0 and boxes[:, [0, 2]].max() <= IMAGE_WIDTH
    assert boxes[:, [1, 3]].max() <= IMAGE_HEIGHT
    from pycocotools import mask as mask_utils
    masks = mask_utils.decode(detections['masks'])
    assert masks.shape == (IMAGE_HEIGHT, IMAGE_WIDTH, count)
    # out_dir: the picture, and the predictions as JSON (no_save_pred=False).
    with Image.open(cwd / 'outputs' / 'vis' / 'demo.jpg') as picture:
        assert picture.size == (IMAGE_WIDTH, IMAGE_HEIGHT)
    with open(cwd / 'outputs' / 'preds' / 'demo.json') as f:
        saved = json.load(f)
    assert saved['labels'] == detections['labels']
    assert np.allclose(saved['bboxes'], detections['bboxes'])


def test_segmentation_script(page_runs):
    outputs, cwd = page_runs('seg')
    label_map = outputs['label_map']
    assert isinstance(label_map, np.ndarray) and label_map.shape == (IMAGE_HEIGHT, IMAGE_WIDTH)
    assert np.issubdtype(label_map.dtype, np.integer)
    assert 0 <= label_map.min() and label_map.max() < 150  # ADE20K's classes
    assert len(np.unique(label_map)) > 1  # random weights: not one class everywhere
    with Image.open(cwd / 'outputs' / 'vis' / 'demo.jpg') as picture:
        assert picture.size == (IMAGE_WIDTH, IMAGE_HEIGHT)
    saved = np.asarray(Image.open(cwd / 'outputs' / 'pred' / '00000000_pred.png'))
    assert (saved == label_map).all()


def test_classification_script(page_runs):
    outputs, cwd = page_runs('cls')
    result = outputs['classification']
    from mmpretrain.datasets.categories import IMAGENET_CATEGORIES
    assert set(result) == {'pred_label', 'pred_score', 'pred_class', 'pred_scores'}
    scores = result['pred_scores']
    assert scores.shape == (1000, ) and abs(float(scores.sum()) - 1) < 1e-4
    assert result['pred_label'] == int(scores.argmax())
    assert result['pred_score'] == pytest.approx(float(scores.max()))
    # The names come from the checkpoint's meta, as written by training.
    assert result['pred_class'] == IMAGENET_CATEGORIES[result['pred_label']]
    with Image.open(cwd / 'outputs' / 'demo.png') as picture:
        assert picture.size[0] > 0


def test_three_toolboxes_in_one_process_predict_what_each_predicts_alone(page_runs):
    together, _ = page_runs('all')
    alone = {name: page_runs(key)[0][name] for key, name in
             (('det', 'detections'), ('seg', 'label_map'), ('cls', 'classification'))}
    det, det_alone = together['detections'], alone['detections']
    assert det['labels'] == det_alone['labels'] and det['masks'] == det_alone['masks']
    assert np.allclose(det['scores'], det_alone['scores'], atol=1e-5)
    assert np.allclose(det['bboxes'], det_alone['bboxes'], atol=1e-3)
    assert (together['label_map'] == alone['label_map']).all()
    cls, cls_alone = together['classification'], alone['classification']
    assert cls['pred_label'] == cls_alone['pred_label']
    assert np.allclose(cls['pred_scores'], cls_alone['pred_scores'], atol=1e-6)


# The toolboxes' own configs: nothing in this script imports cvt_mm.
WITHOUT_CVT_MM = '''
import sys
# What import cvt_mm does first: beside transformers 5, MMPretrain's (and so MMDetection's)
# models import only with MMPretrain's multimodal models off.
from mmpretrain.utils import dependency
dependency.WITH_MULTIMODAL = False
from mmengine.hub import get_config
from mmengine.registry import DefaultScope
from mmdet.apis import DetInferencer
from mmpretrain import ImageClassificationInferencer
from mmpretrain.registry import TRANSFORMS

detector = DetInferencer(model=get_config('mmdet::retinanet/retinanet_r18_fpn_1x_coco.py'),
                         device='cpu', show_progress=False)
classifier_config = get_config('mmpretrain::resnet/resnet18_8xb32_in1k.py')
# What MMPretrain's pipeline gets for a name both toolboxes register, in MMDetection's scope.
resize = TRANSFORMS.build(dict(type='Resize', scale=224))
try:
    ImageClassificationInferencer(model=classifier_config, pretrained=False, device='cpu')
    failure = None
except KeyError as error:
    failure = str(error)
with DefaultScope.overwrite_default_scope('mmpretrain'):
    classifier = ImageClassificationInferencer(model=classifier_config, pretrained=False,
                                               device='cpu')
classification = classifier('demo.jpg')[0]
detections = detector('demo.jpg')['predictions'][0]
scope = DefaultScope.get_current_instance().scope_name
imported = 'cvt_mm' in sys.modules
resize_module = type(resize).__module__
'''


def test_without_cvt_mm_the_toolboxes_collide_and_the_scope_overwrite_fixes_it(user_dir,
                                                                               tmp_path):
    os.symlink(user_dir / 'demo.jpg', tmp_path / 'demo.jpg')
    out = run_script(WITHOUT_CVT_MM, str(tmp_path), ('failure', 'classification', 'detections',
                                                     'scope', 'imported', 'resize_module'))
    assert not out['imported']
    # The collision the page describes, in plain MMPretrain 1.2 after an MMDetection inferencer.
    assert "ResizeEdge is not in the mmdet::transform registry" in out['failure']
    assert out['resize_module'].startswith('mmdet.')  # silently MMDetection's transform
    # The page's way around it, and the detector is unaffected.
    assert 0 <= out['classification']['pred_label'] < 1000
    assert set(out['detections']) == {'labels', 'scores', 'bboxes'}
    assert out['scope'] == 'mmdet'  # the overwrite gave the process its scope back


LOAD_AS_MMENGINE = '''
import json
import sys
from mmengine.runner.checkpoint import CheckpointLoader
path, mode = sys.argv[1:]


def load():
    try:
        return 'loaded ' + ' '.join(sorted(CheckpointLoader.load_checkpoint(path, 'cpu')))
    except Exception as error:
        return f'refused {type(error).__name__}: {str(error).splitlines()[0]}'


said = [load()]
if mode != 'plain':
    import cvt_mm
    said.append(load())
    cvt_mm.compat.safe_load(path)  # our loader, as setup_process makes MMEngine's
    said.append(load())
    if mode == 'setup_process':
        cvt_mm.setup_process()
        said.append(load())
        said.append(load())
print(json.dumps(said))
'''


def test_checkpoints_as_training_writes_them_load_after_import_and_setup_process(user_dir):
    """The scripts' checkpoints hold what training writes (MMEngine's ``HistoryBuffer``,
    numpy arrays), which torch >= 2.6 refuses by default. After ``import cvt_mm`` (its
    allow-list) MMEngine's own loader reads them, and keeps reading them after our safe loader
    ran (torch's ``safe_globals`` removes on exit what it was given); after ``setup_process()``
    our loader reads them, every time."""
    path = str(user_dir / 'work_dirs' / 'upernet_cvt13_ade20k' / 'iter_160000.pth')
    said = {}
    for mode in ('plain', 'import', 'setup_process'):
        done = subprocess.run([sys.executable, '-c', LOAD_AS_MMENGINE, path, mode],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        said[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    loaded = 'loaded message_hub meta state_dict'
    # The suite's torch (2.13); torch < 2.6 would unpickle anything (checkpoints.md).
    assert said['plain'][0].startswith('refused UnpicklingError: Weights only load failed')
    assert said['import'] == [said['plain'][0], loaded, loaded]
    assert said['setup_process'] == [said['plain'][0], loaded, loaded, loaded, loaded]


def test_setup_process_scopes_every_mmpretrain_inferencer():
    """The fix covers every MMPretrain inferencer class, once."""
    from mmpretrain.apis.base import BaseInferencer

    import cvt_mm
    from cvt_mm.integration import scope_mmpretrain_inferencers
    cvt_mm.setup_process()
    assert scope_mmpretrain_inferencers() == []  # done; idempotent

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    defining = [c for c in subclasses(BaseInferencer) if '_init_pipeline' in c.__dict__]
    assert 'ImageClassificationInferencer' in {c.__name__ for c in defining}
    assert all(getattr(c.__dict__['_init_pipeline'], '_cvt_mm_scoped', False) for c in defining)


# --------------------------------------------------------------------------------------------
# tools/misc/image_demo.py, built on the same inferencers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize('config, checkpoint, upsample, says', [
    ('mask_rcnn_cvt13_coco.py', 'mask_rcnn_cvt13_coco/epoch_12.pth', 2,
     r'^10 detections with score >= 0.3 \(at most 10\) drawn at 2x to '),
    ('imagenet_cvt13_300e_in1k.py', 'imagenet_cvt13_300e_in1k/epoch_300.pth', 3,
     r"^(?P<name>.+) \(class (?P<label>\d+), score 0\.\d{3}\) drawn at 3x to "),
], ids=['detection', 'classification'])
def test_image_demo_draws_from_outside_the_checkout(user_dir, tmp_path, config, checkpoint,
                                                    upsample, says):
    """Our configs by absolute path, from the user's folder: detections pasted at twice the
    image size (the inferencer's pipeline, cvt_mm.apis.visualization's upsampling), and the
    classifier's class (a config type the tool gained with the inferencers)."""
    from helpers import run_tool
    out = tmp_path / 'picture.jpg'
    proc = run_tool(['misc/image_demo.py', 'demo.jpg', osp.join(ROOT, 'configs', config),
                     osp.join('work_dirs', checkpoint), '--out-file', str(out),
                     '--upsample', str(upsample)], cwd=str(user_dir))
    said = re.search(says, proc.stdout, re.M)
    assert said, proc.stdout[-2000:]
    if 'label' in said.groupdict():
        from mmpretrain.datasets.categories import IMAGENET_CATEGORIES
        assert said['name'] == IMAGENET_CATEGORIES[int(said['label'])]
    with Image.open(out) as picture:
        assert picture.size == (IMAGE_WIDTH * upsample, IMAGE_HEIGHT * upsample)
