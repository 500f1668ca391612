"""Helpers shared by the detection/segmentation tests: tiny datasets made by the project's own
tool, user configs that inherit the real configs, and running the real tools/ scripts."""
import os
import os.path as osp
import subprocess
import sys

from tool_loader import load_tool  # noqa: F401  (re-exported for the detseg tests)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = osp.join(ROOT, 'configs')
SHAPES = ('circle', 'square', 'triangle')
IMAGE_SIZE = 96




def make_tiny_data(out: str) -> str:
    load_tool('make_demo_data').main([
        '--out', out, '--size', str(IMAGE_SIZE), '--coco-train', '4', '--coco-val', '2',
        '--ade-train', '4', '--ade-val', '2', '--max-objects', '3', '--seed', '1'])
    return out


def det_user_config(path: str, base: str, data_root: str, work_dir: str, **extra) -> str:
    """Write a user's config: inherit ``base`` (a file under configs/), train on the tiny
    COCO-layout shapes data with its three classes, from scratch, one 2-iteration epoch.
    Proposal and RoI counts shrink to what a 96px image with three objects needs (the RoI
    heads' cost grows with them, not with the image)."""
    scale = (IMAGE_SIZE, IMAGE_SIZE)
    text = f'''
_base_ = {osp.join(CONFIGS, base)!r}
data_root = {data_root.rstrip('/') + '/'!r}
classes = {SHAPES!r}
model = dict(
    backbone=dict(init_cfg=None),
    roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                  mask_head=dict(num_classes=len(classes))),
    train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100),
                   rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=50), rcnn=dict(max_per_img=10)))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale={scale!r}, keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale={scale!r}, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                 ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1)
default_hooks = dict(logger=dict(interval=1))
work_dir = {work_dir!r}
'''
    text += ''.join(f'{key} = {value!r}\n' for key, value in extra.items())
    with open(path, 'w') as f:
        f.write(text)
    return path


def seg_user_config(path: str, data_root: str, work_dir: str, max_iters: int = 2,
                    **extra) -> str:
    """Inherit the UperNet CvT-13 demo config (itself a child of upernet_cvt13_ade20k.py) at
    a 64px crop on the tiny ADE-layout data."""
    text = f'''
_base_ = {osp.join(CONFIGS, 'demo', 'upernet_cvt13_demo.py')!r}
data_root = {data_root.rstrip('/') + '/'!r}
crop_size = (64, 64)
model = dict(data_preprocessor=dict(size=crop_size))
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={max_iters}, val_interval={max_iters})
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=2))
work_dir = {work_dir!r}
'''
    text += ''.join(f'{key} = {value!r}\n' for key, value in extra.items())
    with open(path, 'w') as f:
        f.write(text)
    return path


def run_tool(args, timeout=300, env=None) -> subprocess.CompletedProcess:
    """Run a tools/ script (python or bash) from the repository root; fail with its output."""
    full_env = dict(os.environ, **(env or {}))
    full_env['PYTHONPATH'] = ROOT + os.pathsep + full_env.get('PYTHONPATH', '')
    if args[0].endswith('.sh'):
        command = ['bash', osp.join(ROOT, 'tools', args[0]), *args[1:]]
        full_env.setdefault('PYTHON', sys.executable)
    else:
        command = [sys.executable, osp.join(ROOT, 'tools', args[0]), *args[1:]]
    proc = subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (f'{" ".join(command)} failed ({proc.returncode}):\n'
                                  f'{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    return proc
