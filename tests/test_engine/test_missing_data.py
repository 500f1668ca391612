"""The headline commands on a machine without the datasets: one message at the end naming the
missing paths, the expected layout, the page of the docs that describes it and how to point
elsewhere -- instead of the config dump and a traceback."""
import os.path as osp

import pytest

from helpers import ROOT, load_tool

# End-to-end runs of the real tools and runners: left out by `make test-fast`.
pytestmark = pytest.mark.slow



def run_tool_main(name, args, cwd, monkeypatch, capsys):
    """What `python tools/<name>.py ARGS` run from ``cwd`` prints last before it exits."""
    monkeypatch.chdir(cwd)
    monkeypatch.setenv('LOCAL_RANK', '0')
    with pytest.raises(SystemExit) as exit_info:
        load_tool(name).main(args)
    return exit_info.value.code, capsys.readouterr().out


@pytest.mark.parametrize('tool, config, missing, layout', [
    ('train', 'mask_rcnn_cvt13_coco.py', 'train_dataloader: data/coco/annotations/'
     'instances_train2017.json', 'data/coco/annotations/instances_{train,val}2017.json'),
    ('train', 'upernet_cvt13_ade20k.py', 'train_dataloader: data/ade/ADEChallengeData2016/'
     'images/training', 'data/ade/ADEChallengeData2016/annotations/{training,validation}'),
    ('train', 'imagenet_cvt13_300e_in1k.py', 'train_dataloader: data/imagenet/train',
     'data/imagenet/{train,val}/'),
    ('test', 'mask_rcnn_cmt_s_coco.py', 'test_dataloader: data/coco/val2017/',
     'data/coco/{train,val}2017/*.jpg'),
])
def test_missing_dataset_says_where_and_how(tmp_path, monkeypatch, capsys, tool, config,
                                            missing, layout):
    args = [osp.join(ROOT, 'configs', config)] + (['checkpoint.pth'] if tool == 'test' else [])
    message, printed = run_tool_main(tool, args, tmp_path, monkeypatch, capsys)
    # SystemExit(message): Python prints it to stderr, as the last lines, and exits with 1.
    assert isinstance(message, str) and message.startswith('error: the data of'), message
    assert missing in message and layout in message and 'docs/' in message, message
    assert '--cfg-options' in message and 'dataset.data_root=' in message, message
    assert 'model = dict(' not in printed  # no config dump before it


def test_a_data_root_given_on_the_command_line_is_what_is_checked(tmp_path, monkeypatch,
                                                                  capsys):
    message, _ = run_tool_main(
        'train', [osp.join(ROOT, 'configs', 'upernet_cvt13_ade20k.py'), '--cfg-options',
                  f'train_dataloader.dataset.data_root={tmp_path}/my_ade'],
        tmp_path, monkeypatch, capsys)
    assert f'{tmp_path}/my_ade/images/training' in message
