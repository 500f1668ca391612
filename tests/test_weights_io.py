"""Reading checkpoint files: what safe unpickling accepts and what it refuses."""
import argparse

import pytest
import torch

from cvt_mm.models.weights import CheckpointError, extract_state_dict, read_checkpoint


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


def test_arbitrary_pickled_objects_are_refused_naming_the_file(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save({'model': {'w': torch.ones(2)}, 'x': _Payload()}, path)
    with pytest.raises(CheckpointError, match=r'cannot read checkpoint .*evil\.pth'):
        read_checkpoint(str(path))


def test_prefix_must_exist(tmp_path):
    with pytest.raises(CheckpointError, match="prefix 'neck.'"):
        extract_state_dict({'state_dict': {'backbone.w': torch.ones(1)}}, prefix='neck.')
