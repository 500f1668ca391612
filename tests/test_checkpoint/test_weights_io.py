"""Reading checkpoint files: what safe unpickling accepts and what it refuses."""
import argparse

import pytest
import torch

from cvt_mm.checkpoint import CheckpointError, extract_state_dict, read_checkpoint


def test_training_script_checkpoint_with_argparse_namespace_loads(tmp_path):
    # the DeiT/timm layout official CMT training writes: weights plus the run's arguments
    path = tmp_path / 'official.pth'
    torch.save({'model': {'w': torch.ones(2)}, 'epoch': 299,
                'args': argparse.Namespace(lr=5e-4, model='cmt_s')}, path)
    ckpt = read_checkpoint(str(path))
    assert ckpt['args'].model == 'cmt_s'
    sd, dropped = extract_state_dict(ckpt)
    assert list(sd) == ['w'] and dropped == 0


class _Payload:
    def __reduce__(self):
        return (print, ('payload executed', ))


def test_arbitrary_pickled_objects_are_refused_naming_the_file(tmp_path, capsys):
    path = tmp_path / 'evil.pth'
    torch.save({'model': {'w': torch.ones(2)}, 'x': _Payload()}, path)
    with pytest.raises(CheckpointError, match=r'evil\.pth holds pickled Python objects') as err:
        read_checkpoint(str(path))
    assert '(print)' in str(err.value)  # what it carries
    # torch's own message advises weights_only=False; ours never does.
    assert 'weights_only' not in str(err.value) and 'False' not in str(err.value)
    assert 'payload executed' not in capsys.readouterr().out


# What users find under a checkpoint's name when a download went wrong.
HTML_PAGE = b"""<!DOCTYPE html>
<html lang="en"><head><title>OneDrive</title></head><body>Sign in to view this file</body></html>
"""


@pytest.mark.parametrize('make, expected', [
    (lambda p: p.write_bytes(HTML_PAGE), r'is an HTML page \(\d+ bytes\), not a weight file'),
    (lambda p: p.write_bytes(b''), r'is empty \(0 bytes\).*download it again'),
    (lambda p: p.mkdir(), r'is a directory, not a file \(no \.pth'),
    (lambda p: p.write_bytes(b'GIF89a' + bytes(200)), r'is not a weight file: it is neither'),
], ids=['html', 'empty', 'directory', 'other'])
def test_files_that_are_not_checkpoints_say_what_they_are(tmp_path, make, expected):
    path = tmp_path / 'CvT-13-224x224-IN-1k.pth'
    make(path)
    with pytest.raises(CheckpointError, match=expected) as err:
        read_checkpoint(str(path), 'cvt')
    assert str(path) in str(err.value)
    assert 'weights_only' not in str(err.value)


def test_a_directory_lists_the_weight_files_inside(tmp_path):
    torch.save({'w': torch.ones(1)}, tmp_path / 'model.pth')
    with pytest.raises(CheckpointError, match=r'weight files inside: model\.pth'):
        read_checkpoint(str(tmp_path))


def test_a_truncated_download_is_recognised(tmp_path):
    path = tmp_path / 'cmt_small.pth'
    torch.save({'w': torch.randn(1000)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match=r'truncated or damaged torch zip archive: '
                                              r'download it again') as err:
        read_checkpoint(str(path), 'cmt')
    assert 'github.com/ggjy/CMT.pytorch' in str(err.value)  # where to get it again


def test_a_url_is_not_a_missing_file(tmp_path):
    # http(s):// URLs are downloaded (tests/test_checkpoint/test_hub.py); other schemes are not
    url = 's3://bucket/release-v1/cmt_small.pth'
    with pytest.raises(CheckpointError, match=r'is a URL; download the file first'):
        read_checkpoint(url, 'cmt')


def test_legacy_and_safetensors_files_are_still_read(tmp_path):
    from safetensors.torch import save_file
    legacy = tmp_path / 'legacy.pth'
    torch.save({'w': torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(read_checkpoint(str(legacy))['w'], torch.ones(2))
    st = tmp_path / 'weights.bin'  # safetensors content under another suffix
    save_file({'w': torch.ones(3)}, str(st))
    assert torch.equal(read_checkpoint(str(st))['w'], torch.ones(3))


def test_prefix_must_exist(tmp_path):
    with pytest.raises(CheckpointError, match="prefix 'neck.'"):
        extract_state_dict({'state_dict': {'backbone.w': torch.ones(1)}}, prefix='neck.')


def test_convert_weights_to_an_unwritable_path_names_it(tmp_path, capsys):
    from helpers import load_tool
    converter = load_tool('model_converters/convert_weights')
    src = tmp_path / 'ours.pth'
    from cvt_mm.models import CMT
    torch.save(CMT(arch=dict(embed_dims=[8, 16, 32, 64], num_heads=[1, 2, 4, 8],
                             depths=[1, 1, 1, 1]), pretrain_img_size=64).state_dict(), src)
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    for dst in (str(blocker / 'out.pth'), '/proc/cvt_mm_cannot_write_here.pth'):
        assert converter.main([str(src), dst]) == 1
        err = capsys.readouterr().err
        assert f'cannot write {dst}:' in err and 'enforce fail' not in err, err
    assert converter.main([str(src), str(tmp_path / 'ok.pth')]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file', 'ok.pth', 'ours.pth']
