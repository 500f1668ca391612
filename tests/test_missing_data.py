"""The headline commands on a machine without the datasets: one message at the end naming the
missing paths, the expected layout, where the README describes it and how to point elsewhere
-- instead of the config dump and a traceback."""
import os
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_in(cwd, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize('tool, config, missing, layout', [
    ('train.py', 'mask_rcnn_cvt13_coco.py', 'train_dataloader: data/coco/annotations/'
     'instances_train2017.json', 'data/coco/annotations/instances_{train,val}2017.json'),
    ('train.py', 'upernet_cvt13_ade20k.py', 'train_dataloader: data/ade/ADEChallengeData2016/'
     'images/training', 'data/ade/ADEChallengeData2016/annotations/{training,validation}'),
    ('train.py', 'imagenet_cvt13_300e_in1k.py', 'train_dataloader: data/imagenet/train',
     'data/imagenet/{train,val}/'),
    ('test.py', 'mask_rcnn_cmt_s_coco.py', 'test_dataloader: data/coco/val2017/',
     'data/coco/{train,val}2017/*.jpg'),
])
def test_missing_dataset_says_where_and_how(tmp_path, tool, config, missing, layout):
    args = [osp.join(ROOT, 'tools', tool), osp.join(ROOT, 'configs', config)]
    if tool == 'test.py':
        args.append('checkpoint.pth')
    proc = run_in(tmp_path, *args)
    assert proc.returncode == 1
    tail = '\n'.join(proc.stderr.strip().splitlines()[-12:])
    assert tail.startswith('error: the data of') or '\nerror: the data of' in tail, tail
    assert missing in tail and layout in tail and 'README.md' in tail, tail
    assert '--cfg-options' in tail and 'dataset.data_root=' in tail, tail
    assert 'Traceback' not in proc.stderr and 'model = dict(' not in proc.stdout  # no dump


def test_a_data_root_given_on_the_command_line_is_what_is_checked(tmp_path):
    proc = run_in(tmp_path, osp.join(ROOT, 'tools', 'train.py'),
                  osp.join(ROOT, 'configs', 'upernet_cvt13_ade20k.py'), '--cfg-options',
                  f'train_dataloader.dataset.data_root={tmp_path}/my_ade')
    assert f'{tmp_path}/my_ade/images/training' in proc.stderr
