"""Training curves: a real (tiny) training through tools/train.py with the TensorBoard config
fragment writes TensorBoard event files holding the loss and learning rate, and
tools/analysis_tools/plot_curves.py draws its scalars.json as PNGs whose lines hold exactly
the logged values. Resumed runs, missing logs and bad arguments are checked on small
hand-written scalars.json files."""
import glob
import json
import os.path as osp

import numpy as np
import pytest
from PIL import Image

from helpers import ROOT, load_tool, run_tool

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow

plot_tool = load_tool('analysis_tools/plot_curves')
CLS_CONFIG = osp.join(ROOT, 'configs', 'imagenet_cmt_ti_800e_in1k.py')
TB_FRAGMENT = osp.join(ROOT, 'configs', '_base_', 'tensorboard.py')
NUM_CLASSES = 5  # >= 5: top-5 accuracy is among the metrics
IMG_SIZE = 64
EPOCHS, ITERS_PER_EPOCH = 2, 2  # 10 training images, batch 5
PNG_SIZE = (960, 540)  # 8 x 4.5 in at 120 dpi

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:  # the `tensorboard` extra; tools/misc/setup_env.sh installs it
    EventAccumulator = None


def _tiny_imagenet(root):
    """MMPretrain's ImageNet layout: train/<wnid>/*.JPEG, val/*.JPEG, meta/{train,val}.txt;
    one colour per class."""
    rng = np.random.default_rng(0)
    lines = {'train': [], 'val': []}
    for label in range(NUM_CLASSES):
        wnid = f'n{label:08d}'
        colour = rng.integers(0, 256, 3)
        for i in range(3):
            pixels = np.clip(colour + rng.integers(-40, 40, (IMG_SIZE, IMG_SIZE, 3)), 0, 255)
            split, rel = (('train', f'{wnid}/{wnid}_{i}.JPEG') if i < 2 else
                          ('val', f'ILSVRC2012_val_{label:08d}.JPEG'))
            path = osp.join(root, split, rel)
            (root / split / osp.dirname(rel)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.astype(np.uint8)).save(path)
            lines[split].append(f'{rel} {label}')
    (root / 'meta').mkdir()
    for split, split_lines in lines.items():
        (root / 'meta' / f'{split}.txt').write_text('\n'.join(split_lines) + '\n')
    return str(root)


# A user's config as docs/curves.md shows it: the TensorBoard fragment beside a model config,
# here CMT-Ti's ImageNet recipe at 64 px on the tiny set, 2 epochs of 2 iterations, validated
# after each epoch, no checkpoint files (they are not what is tested, and cost time).
TENSORBOARD_LINES = '''
_base_ = [{config!r}, {fragment!r}]
visualizer = dict(vis_backends=_base_.tensorboard_vis_backends)
'''
USER_CONFIG = '''
data_root = {data_root!r}
model = dict(backbone=dict(num_classes={classes}))
data_preprocessor = dict(num_classes={classes})
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale={size}, backend='pillow'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale={size}, edge='short', backend='pillow'),
    dict(type='CenterCrop', crop_size={size}),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=5, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=5, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(by_epoch=True, max_epochs={epochs}, val_interval=1)
default_hooks = dict(logger=dict(interval=1), checkpoint=None)
randomness = dict(seed=0)
'''


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """The work dir of a real training run with the TensorBoard fragment on."""
    root = tmp_path_factory.mktemp('curves')
    data_root = _tiny_imagenet(root / 'imagenet')
    config = root / 'cmt_ti_tensorboard.py'
    # Without tensorboard the TensorBoard tests skip, and plot_curves is still tested.
    head = (f'_base_ = {CLS_CONFIG!r}\n' if EventAccumulator is None else
            TENSORBOARD_LINES.format(config=CLS_CONFIG, fragment=TB_FRAGMENT))
    config.write_text(head + USER_CONFIG.format(data_root=data_root, classes=NUM_CLASSES,
                                                size=IMG_SIZE, epochs=EPOCHS))
    work_dir = str(root / 'work')
    run_tool(['train.py', str(config), '--work-dir', work_dir], timeout=300)
    return work_dir


def _scalars(work_dir):
    (path, ) = glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))
    with open(path) as f:
        return [json.loads(line) for line in f]


def _need_tensorboard():
    if EventAccumulator is None:
        pytest.skip('tensorboard is not installed (pip install -e ".[tensorboard]", or '
                    'tools/misc/setup_env.sh): TensorBoard event files cannot be written or read')


def _events(work_dir):
    _need_tensorboard()
    files = glob.glob(osp.join(work_dir, '*', 'vis_data', 'events.out.tfevents.*'))
    assert files, f'no TensorBoard event file under {work_dir}/*/vis_data'
    accumulator = EventAccumulator(osp.dirname(files[0]))
    accumulator.Reload()
    return accumulator


# ------------------------------------------------------------------------------------------
# TensorBoard
# ------------------------------------------------------------------------------------------
def test_tensorboard_fragment_writes_loss_lr_and_metrics(trained):
    accumulator = _events(trained)
    tags = set(accumulator.Tags()['scalars'])
    assert {'loss', 'lr', 'accuracy/top1', 'accuracy/top5'} <= tags, tags
    train = [r for r in _scalars(trained) if 'iter' in r]
    assert len(train) == EPOCHS * ITERS_PER_EPOCH
    for key in ('loss', 'lr'):
        events = accumulator.Scalars(key)
        assert [e.step for e in events] == [r['step'] for r in train]
        np.testing.assert_allclose([e.value for e in events], [r[key] for r in train],
                                   rtol=1e-6)  # float32 in the event file
    assert [e.step for e in accumulator.Scalars('accuracy/top1')] == list(
        range(1, EPOCHS + 1))


def test_tensorboard_on_the_command_line(tmp_path):
    """`--cfg-options visualizer.vis_backends.0.type=TensorboardVisBackend` (what the command
    line can express: it replaces the LocalVisBackend) gives a visualizer that writes event
    files. DictAction cannot parse a list of dicts, so both backends need a config."""
    _need_tensorboard()
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import VISUALIZERS
    train_tool = load_tool('train')
    from cvt_mm.apis.launch import config_from_args
    args = train_tool.parse_args([CLS_CONFIG, '--cfg-options',
                                  'visualizer.vis_backends.0.type=TensorboardVisBackend'])
    cfg = config_from_args(args)
    assert cfg.visualizer.vis_backends == [dict(type='TensorboardVisBackend')]
    init_default_scope('mmpretrain')
    visualizer = VISUALIZERS.build(dict(cfg.visualizer, name='curves_cli_check',
                                        save_dir=str(tmp_path)))
    visualizer.add_scalars(dict(loss=1.5, lr=1e-3), step=3)
    visualizer.close()
    accumulator = EventAccumulator(str(tmp_path / 'vis_data'))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars('loss')] == [(3, 1.5)]


# ------------------------------------------------------------------------------------------
# plot_curves on the real run
# ------------------------------------------------------------------------------------------
def test_plot_curves_draws_what_was_logged(trained, tmp_path, capsys):
    out = tmp_path / 'curves'
    plots = plot_tool.main([trained, '--out', str(out)])
    printed = capsys.readouterr().out
    assert [p.name for p in plots] == ['loss', 'lr', 'val_metrics']
    for plot in plots:
        assert plot.path == str(out / f'{plot.name}.png') and plot.path in printed
        with Image.open(plot.path) as image:
            assert image.format == 'PNG' and image.size == PNG_SIZE
            # Not a blank canvas: lines, labels and legend were drawn.
            assert len(np.unique(np.asarray(image.convert('L')))) > 20

    scalars = _scalars(trained)
    train = [r for r in scalars if 'iter' in r]
    val = [r for r in scalars if 'iter' not in r]
    assert len(val) == EPOCHS
    by_name = {p.name: p for p in plots}
    loss_keys = sorted(k for k in train[0] if k.startswith('loss'))
    assert sorted(by_name['loss'].series) == loss_keys
    for key in loss_keys:
        xs, ys = by_name['loss'].series[key]
        assert xs == [r['iter'] for r in train] == list(range(1, EPOCHS * ITERS_PER_EPOCH + 1))
        assert ys == [r[key] for r in train]
    # `lr` and, as the config has a paramwise_cfg, MMEngine's `base_lr`.
    lr_keys = [k for k in train[0] if k.endswith('lr')]
    assert 'lr' in lr_keys
    assert by_name['lr'].series == {
        key: ([r['iter'] for r in train], [r[key] for r in train]) for key in lr_keys}
    assert by_name['val_metrics'].xlabel == 'epoch'
    assert by_name['val_metrics'].series == {
        key: ([r['step'] for r in val], [r[key] for r in val])
        for key in ('accuracy/top1', 'accuracy/top5')}


def test_plot_curves_default_out_and_keys(trained):
    plots = plot_tool.main([trained, '--keys', 'accuracy/top1', 'l*'])
    assert [p.path for p in plots] == [osp.join(trained, 'curves', f'{n}.png')
                                       for n in ('loss', 'lr', 'val_metrics')]
    assert list(plots[2].series) == ['accuracy/top1']


# ------------------------------------------------------------------------------------------
# Runs, resumed runs, missing logs (hand-written scalars.json)
# ------------------------------------------------------------------------------------------
def _write_run(work_dir, timestamp, records, resumed=None):
    vis = work_dir / timestamp / 'vis_data'
    vis.mkdir(parents=True)
    (vis / 'scalars.json').write_text(''.join(json.dumps(r) + '\n' for r in records))
    if resumed is not None:
        (vis / 'config.py').write_text(f"default_scope = 'mmdet'\nresume = {resumed}\n")
    return str(vis / 'scalars.json')


def _train(iters, epoch_len=10):
    return [dict(lr=0.01, loss=1.0 / i, loss_cls=0.5 / i, data_time=0.1, time=0.5,
                 epoch=(i - 1) // epoch_len + 1, iter=i, step=i) for i in iters]


def _val(epoch, value):
    # COCO's -1: no objects of that size (none large at all, no small ones in epoch 1).
    return {'coco/bbox_mAP': value, 'coco/bbox_mAP_s': -1.0 if epoch == 1 else value / 2,
            'coco/bbox_mAP_l': -1.0,
            'coco/bbox_mAP_copypaste': '0.1 0.2', 'data_time': 0.1, 'time': 0.2,
            'step': epoch}


@pytest.mark.parametrize('with_config', [True, False], ids=['config', 'iterations'])
def test_resumed_run_is_joined_to_the_run_it_continues(tmp_path, with_config):
    """Run 1 logs iterations 5..30 and validates epochs 1-3, then stops; run 2 resumes from
    the epoch-2 checkpoint (iteration 20) and logs 25..40, validating epochs 3 and 4. Drawn:
    run 1 up to iteration 20 and epoch 2, then run 2. An older, unrelated run is left out."""
    flag = (lambda value: value) if with_config else (lambda value: None)
    _write_run(tmp_path, '20240101_000000', _train(range(5, 15, 5)), resumed=flag(False))
    run1 = _train(range(5, 35, 5))
    run1[2:2] = [_val(1, 0.1)]
    run1[5:5] = [_val(2, 0.2)]
    run1.append(_val(3, 0.25))
    _write_run(tmp_path, '20240102_000000', run1, resumed=flag(False))
    run2 = _train(range(25, 45, 5))
    run2[2:2] = [_val(3, 0.3)]
    run2.append(_val(4, 0.4))
    _write_run(tmp_path, '20240103_000000', run2, resumed=flag(True))

    records, sources = plot_tool.load_records(str(tmp_path))
    assert [osp.basename(osp.dirname(osp.dirname(s))) for s in sources] == [
        '20240102_000000', '20240103_000000']
    curves = plot_tool.collect_curves(records)
    assert curves['loss']['loss'][0] == list(range(5, 45, 5))
    assert curves['val_metrics']['coco/bbox_mAP'] == ([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    xs, ys = curves['val_metrics']['coco/bbox_mAP_s']
    assert xs == [1, 2, 3, 4] and np.isnan(ys[0]) and ys[1:] == [0.1, 0.15, 0.2]  # a gap
    assert 'coco/bbox_mAP_l' not in curves['val_metrics']  # never defined
    assert 'coco/bbox_mAP_copypaste' not in curves['val_metrics']  # a string

    # --run: one run alone.
    records, _ = plot_tool.load_records(str(tmp_path), run='20240103_000000')
    assert plot_tool.collect_curves(records)['loss']['loss'][0] == [25, 30, 35, 40]


def test_a_fresh_run_after_an_old_one_is_drawn_alone(tmp_path, capsys):
    _write_run(tmp_path, '20240101_000000', _train(range(10, 50, 10)))
    _write_run(tmp_path, '20240102_000000', _train(range(10, 30, 10)))
    plots = plot_tool.main([str(tmp_path)])
    assert plots[0].series['loss'][0] == [10, 20]
    # No validation yet: that picture is skipped, and the user is told.
    assert [p.name for p in plots] == ['loss', 'lr']
    assert 'skipped val_metrics.png: no validation metrics logged yet' in capsys.readouterr().out


def test_scalars_json_path_and_run_folder(tmp_path):
    path = _write_run(tmp_path / 'work', '20240101_000000', _train([1, 2, 3]) + [_val(1, .5)])
    for source in (path, osp.dirname(osp.dirname(path))):
        plots = plot_tool.main([source])
        # Pictures go to the work dir's curves/, as for the work dir itself.
        assert [p.path for p in plots] == [str(tmp_path / 'work' / 'curves' / f'{n}.png')
                                           for n in ('loss', 'lr', 'val_metrics')]


def test_a_cut_off_last_line_is_ignored(tmp_path):
    path = _write_run(tmp_path, '20240101_000000', _train([1, 2]))
    with open(path, 'a') as f:
        f.write('{"lr": 0.01, "lo')
    assert len(plot_tool.read_scalars(path)) == 2


@pytest.mark.parametrize('argv, message', [
    (['{work}'], "no scalars.json under {work}: looked for {work}/<timestamp>/vis_data/"
                 "scalars.json"),
    (['{work}/missing'], '{work}/missing does not exist'),
    (['{run}', '--run', 'x'], '--run needs a work dir'),
    (['{work}', '--run', '20990101_000000'], "no run '20990101_000000'"),
    (['{run}', '--keys', 'acc*'], '--keys acc*: not in the logs; they hold loss, loss_cls, lr'),
    (['{blank}'], '{blank}/20240101_000000/vis_data/scalars.json: no lines logged yet'),
])
def test_bad_arguments_are_parser_errors(tmp_path, capsys, argv, message):
    work = tmp_path / 'empty'
    work.mkdir()
    run = _write_run(tmp_path / 'other', '20240101_000000', _train([1, 2]))
    _write_run(tmp_path / 'blank', '20240101_000000', [])
    fill = dict(work=str(work), run=run, blank=str(tmp_path / 'blank'))
    with pytest.raises(SystemExit) as exit_info:
        plot_tool.main([a.format(**fill) for a in argv])
    assert exit_info.value.code == 2
    assert message.format(**fill) in capsys.readouterr().err
