"""`make demo` (tools/misc/run_demo.sh): its data, its two configs, the pictures it draws, and
the whole pretrain -> detect -> evaluate -> draw chain run on a few images."""
import copy
import glob
import json
import os.path as osp
import re

import numpy as np
import pytest
import torch
from mmengine.config import Config
from PIL import Image

from helpers import CONFIGS, ROOT, SHAPES, load_tool, run_tool

PRETRAIN = osp.join(CONFIGS, 'demo', 'imagenet_cvt13_demo.py')
DETECT = osp.join(CONFIGS, 'demo', 'mask_rcnn_cvt13_demo.py')


def write_data(out, *extra):
    load_tool('misc/make_demo_data').main(
        ['--out', str(out), '--coco-train', '0', '--coco-val', '0', '--ade-train', '0',
         '--ade-val', '0', *extra])


def test_imagenet_layout_is_read_by_mmpretrain_with_the_right_labels(tmp_path):
    from mmpretrain.datasets import ImageNet
    write_data(tmp_path, '--imagenet-train', '7', '--imagenet-val', '3')
    dataset = ImageNet(data_root=str(tmp_path / 'imagenet'), split='train',
                       metainfo=dict(classes=SHAPES))
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert sorted(int(info['gt_label']) for info in infos) == [0, 0, 0, 1, 1, 2, 2]
    for info in infos:
        # The label is what the image shows. Colours are random, so tell the shape by how much
        # of its circumscribed circle it fills: circle 1, square 2/pi, triangle 3*sqrt(3)/4pi.
        pixels = np.asarray(Image.open(info['img_path']).convert('RGB'), np.float64)
        mask = pixels.max(2) - pixels.min(2) > 100
        ys, xs = np.nonzero(mask)
        radius = np.hypot(ys - ys.mean(), xs - xs.mean()).max() + 0.5
        fill = mask.sum() / (np.pi * radius ** 2)
        expected = np.array([1, 2 / np.pi, 3 * np.sqrt(3) / (4 * np.pi)])
        assert np.abs(expected - fill).argmin() == int(info['gt_label']), fill
    assert len(ImageNet(data_root=str(tmp_path / 'imagenet'), split='val',
                        metainfo=dict(classes=SHAPES))) == 3


@pytest.mark.parametrize('cue', ['tint', 'texture'])
def test_demo_data_is_the_same_for_the_same_seed(tmp_path, cue):
    for name in ('a', 'b'):
        write_data(tmp_path / name, '--imagenet-train', '3', '--coco-train', '2', '--cue', cue)
    files = sorted(glob.glob(str(tmp_path / 'a' / '**' / '*.*'), recursive=True))
    assert len(files) == 3 + 2 + 1  # images + the COCO annotation file
    for path in files:
        with open(path, 'rb') as a, open(path.replace('/a/', '/b/'), 'rb') as b:
            assert a.read() == b.read(), path


@pytest.mark.parametrize('flag', ['--imagenet-size', '--imagenet-train'])
def test_demo_data_rejects_bad_sizes(flag):
    value = '16' if flag == '--imagenet-size' else '-1'
    with pytest.raises(ValueError, match=flag):
        load_tool('misc/make_demo_data').parse_args([flag, value])


def test_detection_starts_from_the_checkpoint_that_pretraining_writes():
    """tools/train.py writes work_dirs/<config name>/epoch_<max_epochs>.pth by default."""
    pretrain, detect = Config.fromfile(PRETRAIN), Config.fromfile(DETECT)
    expected = (f'work_dirs/{osp.splitext(osp.basename(PRETRAIN))[0]}/'
                f'epoch_{pretrain.train_cfg.max_epochs}.pth')
    assert detect.model.backbone.init_cfg == dict(type='Pretrained', checkpoint=expected)
    assert pretrain.model.backbone.type == detect.model.backbone.type == 'CvT'
    assert pretrain.model.backbone.arch == detect.model.backbone.arch


# --------------------------------------------------------------------------------------------
# Pictures
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def random_detector(tmp_path_factory):
    """The demo's Mask R-CNN with random weights, keeping every prediction, and one image."""
    from mmdet.apis import init_detector
    root = tmp_path_factory.mktemp('pictures')
    load_tool('misc/make_demo_data').main(
        ['--out', str(root), '--coco-train', '0', '--coco-val', '1', '--ade-train', '0',
         '--ade-val', '0'])
    cfg = Config.fromfile(DETECT)
    cfg.model.backbone.init_cfg = None
    cfg.model.test_cfg.rcnn.score_thr = 0.0
    torch.manual_seed(0)
    model = init_detector(cfg, device='cpu')
    return model, glob.glob(str(root / 'coco' / 'val2017' / '*.jpg'))[0]


def test_predictions_are_pasted_at_a_multiple_of_the_size_from_the_same_input(random_detector):
    from mmcv.transforms import Compose
    from mmdet.utils import get_test_pipeline_cfg

    from cvt_mm.apis.visualization import predict_upsampled
    model, image = random_detector
    pipeline = [t for t in get_test_pipeline_cfg(model.cfg) if t['type'] != 'LoadAnnotations']
    data = Compose(pipeline)(dict(img_path=image, img_id=0))
    one = predict_upsampled(model, copy.deepcopy(data), 1).pred_instances
    three = predict_upsampled(model, copy.deepcopy(data), 3).pred_instances
    assert len(one) > 0
    torch.testing.assert_close(three.scores, one.scores)
    torch.testing.assert_close(three.bboxes, one.bboxes * 3, rtol=1e-4, atol=1e-3)
    assert three.masks.shape[-2:] == (3 * one.masks.shape[-2], 3 * one.masks.shape[-1])
    # The same masks, pasted finer: every third pixel of the large ones is the small one,
    # up to the rounding of the box edges.
    agreement = (three.masks[:, 1::3, 1::3] == one.masks).float().mean()
    assert agreement > 0.97
    with pytest.raises(ValueError, match='factor must be an integer >= 1'):
        predict_upsampled(model, copy.deepcopy(data), 0)


def test_best_predictions_keeps_the_best_above_the_threshold():
    from mmengine.structures import InstanceData

    from cvt_mm.apis.visualization import best_predictions
    instances = InstanceData(scores=torch.tensor([0.2, 0.9, 0.6, 0.7, 0.95]),
                             labels=torch.arange(5))
    kept = best_predictions(instances, score_thr=0.5, max_count=3)
    assert kept.labels.tolist() == [4, 1, 3]
    assert len(best_predictions(instances, score_thr=0.99, max_count=3)) == 0


def test_enlarge_labels_scales_every_font_size():
    from mmdet.visualization import DetLocalVisualizer

    from cvt_mm.apis.visualization import enlarge_labels
    visualizer = DetLocalVisualizer()
    seen = []
    draw_texts = visualizer.draw_texts
    visualizer.draw_texts = lambda *a, font_sizes=None, **k: (
        seen.append(font_sizes), draw_texts(*a, font_sizes=font_sizes, **k))
    enlarge_labels(visualizer, 2)
    visualizer.set_image(np.zeros((64, 64, 3), np.uint8))
    visualizer.draw_texts('a', np.array([4, 4]), font_sizes=9)
    visualizer.draw_texts(['a', 'b'], np.array([[4, 4], [9, 9]]), font_sizes=[6, 13])
    assert seen == [18, [12, 26]]
    with pytest.raises(ValueError, match='factor must be > 0'):
        enlarge_labels(visualizer, 0)


@pytest.mark.parametrize('args, message', [
    (['--upsample', '0'], '--upsample must be >= 1'),
    (['--max-per-image', '0'], '--max-per-image must be >= 1'),
    (['--score-thr', '1.5'], r'--score-thr must be in \[0, 1\]'),
    (['--font-scale', '0'], '--font-scale must be > 0'),
])
def test_prediction_grid_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        load_tool('analysis_tools/prediction_grid').parse_args(['c.py', 'c.pth', *args])


def test_prediction_grid_draws_detection_configs_only():
    grid = load_tool('analysis_tools/prediction_grid')
    with pytest.raises(ValueError, match="default_scope='mmdet'.*'mmpretrain'"):
        grid.main([PRETRAIN, 'unused.pth'])


# --------------------------------------------------------------------------------------------
# The whole chain, as `make demo` runs it, on a few images
# --------------------------------------------------------------------------------------------
TINY = '--imagenet-train 9 --imagenet-val 3 --coco-train 4 --coco-val 2 --ade-train 4 --ade-val 2'


@pytest.fixture(scope='module')
def demo_run(tmp_path_factory):
    """run_demo.sh in an empty directory: it writes data/, work_dirs/ and outputs/ there.
    Batches hold every image, so each epoch is one iteration; UperNet runs 4 of its 400."""
    cwd = tmp_path_factory.mktemp('demo')
    proc = run_tool(['misc/run_demo.sh'], cwd=str(cwd), timeout=900, expect_success=False,
                    env=dict(DEMO_DATA_ARGS=TINY, DEMO_UPERNET_ITERS='4'))
    # A few images do not give the page's numbers: the demo runs every stage, then fails.
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ''
    assert proc.returncode == 1 and last.startswith('docs/demo.md: this run differs'), (
        proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:])
    return cwd, proc.stdout + proc.stderr, proc.stdout


@pytest.mark.slow
def test_demo_runs_the_stages_in_order_with_an_eta(demo_run):
    cwd, log, _ = demo_run
    stages = re.findall(r'== (\d)/8 (.+?)  \[(\d+)m(\d\d)s elapsed, about (\d+)m(\d\d)s left\]',
                        log)
    assert [int(s[0]) for s in stages] == list(range(1, 9))
    assert [s[1] for s in stages] == [
        'demo data', 'pretraining', 'Mask R-CNN fine-tuning', 'Mask R-CNN evaluation',
        'UperNet fine-tuning', 'UperNet evaluation', 'pictures', 'curves']
    elapsed = [int(s[2]) * 60 + int(s[3]) for s in stages]
    assert elapsed == sorted(elapsed)
    assert re.search(r'== demo done in \d+m\d+s', log)
    # DEMO_UPERNET_ITERS=4 shortened UperNet's schedule, validation and checkpoint with it.
    assert (cwd / 'work_dirs' / 'upernet_cvt13_demo' / 'iter_4.pth').exists()


@pytest.mark.slow
def test_demo_fine_tunes_from_the_pretrained_checkpoint(demo_run):
    from mmdet.registry import MODELS
    from mmengine.registry import init_default_scope
    cwd, log, _ = demo_run
    checkpoint = cwd / 'work_dirs' / 'imagenet_cvt13_demo' / 'epoch_3.pth'
    # Mask R-CNN and UperNet both start from it.
    assert log.count('Loaded CvT weights from work_dirs/imagenet_cvt13_demo/epoch_3.pth') == 2
    # The detection config's init_cfg, as written, gives the backbone the pretrained tensors.
    init_default_scope('mmdet')
    cfg = Config.fromfile(DETECT)
    cfg.model.backbone.init_cfg.checkpoint = str(checkpoint)
    model = MODELS.build(cfg.model)
    model.init_weights()
    pretrained = torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict']
    backbone = model.backbone.state_dict()
    compared = 0
    for key, value in pretrained.items():
        name = key[len('backbone.'):]
        if key.startswith('backbone.stages.') and name in backbone:
            torch.testing.assert_close(backbone[name], value, rtol=0, atol=0)
            compared += 1
    assert compared > 100


@pytest.mark.slow
@pytest.mark.parametrize('stage, keys', [
    ('mask_rcnn_cvt13_demo', ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP')),
    ('upernet_cvt13_demo', ('mIoU', 'mAcc', 'aAcc')),
])
def test_demo_evaluation_agrees_with_the_last_validation(demo_run, stage, keys):
    """tools/test.py on the saved checkpoint gives the numbers training printed."""
    cwd, log, _ = demo_run
    work = cwd / 'work_dirs' / stage
    tested = json.load(open(glob.glob(str(work / 'test' / '*' / '*.json'))[0]))
    scalars = glob.glob(str(work / '2*' / 'vis_data' / 'scalars.json'))[0]
    validated = [json.loads(line) for line in open(scalars) if keys[0] in line][-1]
    for key in keys:
        assert tested[key] == validated[key], key
    printed = (f'Mask R-CNN bbox: mAP {tested["coco/bbox_mAP"]:.3f}' if 'coco/bbox_mAP' in keys
               else f'UperNet: mIoU {tested["mIoU"]:.2f}')
    assert printed in log


def test_readme_states_the_demo_pages_numbers():
    """README.md states some of the demo's numbers, each as docs/demo.md does; the page
    states every metric of the final evaluations and the pretraining's top-1 per epoch."""
    summary = load_tool('misc/demo_summary')
    readme, page = (summary.stated_results(open(osp.join(ROOT, name), encoding='utf-8').read())
                    for name in ('README.md', 'docs/demo.md'))
    assert {'bbox mAP', 'segm mAP', 'mIoU'} <= readme.keys()
    assert {name: page.get(name) for name in readme} == readme
    assert set(page) == {f'{kind} {metric}' for kind in ('bbox', 'segm')
                         for metric in ('mAP', 'AP50', 'AP75')} | {
        'mIoU', 'mAcc', 'aAcc', 'top-1 epoch 1', 'top-1 epoch 2', 'top-1 epoch 3'}
    with pytest.raises(ValueError, match='states mIoU nowhere'):
        summary.stated_results('**bbox mAP 0.660 (AP50 1.0), segm mAP 0.856 (AP50 1.0)**')
    with pytest.raises(ValueError, match='states bbox mAP twice: 0.660 and 0.661'):
        summary.stated_results('**bbox mAP 0.660, segm mAP 0.8, mIoU 9.1** **bbox mAP 0.661**')


def fake_demo_outputs(root, top1=(96.0, 100.0, 100.0), bbox=(0.7104, 0.9899, 0.79),
                      segm=(0.883, 0.994, 0.983), seg=(99.61, 99.72, 99.93)):
    """The files demo_summary reads, as the demo's trainings and tools/test.py write them."""
    (root / 'pre' / 'run' / 'vis_data').mkdir(parents=True)
    (root / 'pre' / 'run' / 'vis_data' / 'scalars.json').write_text(''.join(
        json.dumps({'loss': 1.0}) + '\n' + json.dumps({'accuracy/top1': v}) + '\n'
        for v in top1))
    coco = {f'coco/{kind}_mAP{suffix}': value for kind, values in (('bbox', bbox), ('segm', segm))
            for suffix, value in zip(('', '_50', '_75'), values)}
    for name, result in (('det', coco), ('seg', dict(zip(('mIoU', 'mAcc', 'aAcc'), seg)))):
        (root / name / 'run').mkdir(parents=True)
        (root / name / 'run' / 'run.json').write_text(json.dumps(result))
    return [str(root / name) for name in ('pre', 'det', 'seg')] + [str(root / 'out')]


def test_the_demo_fails_naming_each_number_that_differs_from_its_page(tmp_path, capsys):
    summary = load_tool('misc/demo_summary')
    page = tmp_path / 'demo.md'
    page.write_text(open(osp.join(ROOT, 'docs', 'demo.md'), encoding='utf-8').read())
    stated = summary.stated_results(page.read_text())
    values = {name: float(value) for name, value in stated.items()}
    runs = fake_demo_outputs(
        tmp_path, top1=[values[f'top-1 epoch {e}'] for e in (1, 2, 3)],
        bbox=[values[f'bbox {m}'] + 4e-4 for m in ('mAP', 'AP50', 'AP75')],
        segm=[values[f'segm {m}'] for m in ('mAP', 'AP50', 'AP75')],
        seg=[values[m] for m in ('mIoU', 'mAcc', 'aAcc')])
    assert summary.main([*runs, '--page', str(page)]) == 0
    assert capsys.readouterr().out.endswith(
        f'this run gives the {len(stated)} numbers the page states\n')
    # One digit of AP75 and one of top-1 changed on the page: the demo fails, naming both.
    text = page.read_text()
    changed = (text.replace(f'AP75 {stated["bbox AP75"]}', 'AP75 0.123')
               .replace(f'top-1 {stated["top-1 epoch 1"]}', 'top-1 12.5'))
    assert changed.count('0.123') == text.count('0.123') + 1
    page.write_text(changed)
    assert summary.main([*runs, '--page', str(page)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith('docs/demo.md: this run differs in 2 of the 12 numbers the page '
                           'states: '), last
    moved = values['bbox AP75'] + 4e-4 - 0.123
    assert f'bbox AP75 {values["bbox AP75"] + 4e-4:.3f} (page 0.123, {moved:+.3f})' in last
    assert f'top-1 epoch 1 {values["top-1 epoch 1"]:.1f} (page 12.5, ' in last
    assert summary.main([*runs, '--page', str(page), '--no-compare']) == 0
    assert capsys.readouterr().out.endswith('not compared (DEMO_COMPARE=0)\n')


@pytest.mark.slow
def test_the_demo_ends_comparing_its_results_with_the_page(demo_run):
    """On a few images the numbers are not the page's: the run says so, names them, exits 1
    (the fixture checks the exit status)."""
    _, _, stdout = demo_run
    line = stdout.strip().splitlines()[-1]
    assert re.match(r'docs/demo.md: this run differs in \d+ of the 12 numbers the page states: '
                    r'.*bbox mAP \d\.\d{3} \(page \d\.\d{3}, [+-]\d\.\d{3}\)', line), line
    assert 'update README.md and docs/demo.md' in line


@pytest.mark.slow
def test_demo_draws_readable_pictures_and_lists_them(demo_run):
    cwd, _, stdout = demo_run
    out = cwd / 'outputs' / 'demo'
    with Image.open(out / 'val_predictions.jpg') as grid:
        # Two val images of 128 px, drawn 3x: one row of one (ground truth | prediction) cell
        # per column, two columns, under the 40 px header.
        assert grid.size == (2 * (2 * 384) + 8, 40 + 384)
    with Image.open(out / 'image_demo.jpg') as picture:
        assert picture.size == (384, 384)
    listed = stdout[stdout.index('\npictures:\n') + 11:].splitlines()
    pictures = [line.split()[0] for line in listed if line.startswith('  ')]
    assert 'outputs/demo/val_predictions.jpg' in pictures
    curves = [p for p in pictures if p.startswith('outputs/demo/curves/')]
    assert {p.split('/')[3] for p in curves} == {'imagenet', 'mask_rcnn', 'upernet'}
    # tools/test.py's segmentation pictures: ground truth | prediction for each val image.
    (folder, ) = [p for p in pictures if p.startswith('outputs/demo/segmentation/')]
    assert re.search(re.escape(folder) + r'\s+\(2 ground truth \| prediction pictures', stdout)
    assert len(glob.glob(str(cwd / folder / '*.png'))) == 2
    assert all(osp.exists(cwd / p) for p in pictures)


@pytest.mark.slow
@pytest.mark.parametrize('config, stage', [(PRETRAIN, 'imagenet_cvt13_demo'),
                                           (DETECT, 'mask_rcnn_cvt13_demo')])
def test_demo_training_is_deterministic(demo_run, config, stage):
    """Run again with the same seed: bit-identical weights, so the printed metrics repeat.
    The second run is a fork of the warm tools' server (tests/warm_tools.py), the first a
    fresh ``python tools/train.py`` of the demo script: the run does not depend on which."""
    cwd, _, _ = demo_run
    run_tool(['train.py', config, '--work-dir', f'work_dirs/again_{stage}'], cwd=str(cwd),
             warm=True)
    first = torch.load(cwd / 'work_dirs' / stage / 'epoch_3.pth', map_location='cpu',
                       weights_only=False)['state_dict']
    again = torch.load(cwd / 'work_dirs' / f'again_{stage}' / 'epoch_3.pth',
                       map_location='cpu', weights_only=False)['state_dict']
    assert first.keys() == again.keys()
    for key in first:
        assert torch.equal(first[key], again[key]), key
