"""tools/misc/export_pretrained.py: a checkpoint of any layout we load (official, Hugging
Face, a trained detector of our configs, a custom arch) written as one folder that timm's
``local-dir:`` and transformers' Auto classes both load, the SHA-256 of the weights printed.
(The folder without cvt_mm, through its own code: tests/test_tools/test_hub_folders.py.)"""
import hashlib
import json
import re

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForImageClassification

import cvt_mm  # noqa: F401
from cvt_mm.models import CMTModel, CvTModel
from cvt_mm.models.export import main
from cvt_mm.models.huggingface import CMTBackbone, CMTBaseModel, CMTForImageClassification

from helpers import CONFIGS, run_tool, write_checkpoint
from layouts import cmt_to_official, cvt_to_huggingface

TOOL = 'misc/export_pretrained.py'
X = torch.randn(1, 3, 80, 112, generator=torch.Generator().manual_seed(3))


def export(*args, expect_success=True):
    """The tool in a fork of the warm tools' server (tests/warm_tools.py: the stack imported
    once), which imports cvt_mm as the tool does."""
    return run_tool([TOOL, *map(str, args)], expect_success=expect_success, warm=True)


def test_an_official_file_gives_a_folder_both_libraries_load(tmp_path):
    torch.manual_seed(0)
    source = CMTModel('ti').eval()
    torch.save({'model': cmt_to_official(source.state_dict())}, tmp_path / 'cmt_tiny.pth')
    out = tmp_path / 'cmt_ti'
    proc = export(tmp_path / 'cmt_tiny.pth', out)
    weights = (out / 'model.safetensors').read_bytes()
    assert f'sha256 {hashlib.sha256(weights).hexdigest()}' in proc.stdout
    assert 'cmt-official' in proc.stdout
    config = json.loads((out / 'config.json').read_text())
    assert config['architecture'] == 'cmt_ti' and config['model_type'] == 'cvt_mm_cmt'
    assert config['pretrained_cfg']['input_size'] == [3, 160, 160]
    assert config['out_features'] == ['stage1', 'stage2', 'stage3', 'stage4']
    model = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    assert timm.data.resolve_data_config({}, model=model)['crop_pct'] == 0.875
    assert type(AutoModel.from_pretrained(out)) is CMTBaseModel
    classifier = AutoModelForImageClassification.from_pretrained(out).eval()
    assert type(classifier) is CMTForImageClassification
    backbone = CMTBackbone.from_pretrained(out).eval()
    with torch.no_grad():
        assert torch.equal(model(X), source(X))
        assert torch.equal(classifier(X).logits, source(X))
        for a, b in zip(backbone(X).feature_maps, source.forward_intermediates(
                X, intermediates_only=True)):
            assert torch.equal(a, b)


def test_the_backbone_of_a_trained_detector_and_a_hugging_face_file(tmp_path):
    ckpt = write_checkpoint(f'{CONFIGS}/mask_rcnn_cvt13_coco.py', str(tmp_path / 'epoch_12.pth'))
    out = tmp_path / 'from_detector'
    assert 'dropped 6 tensors of the OpenMMLab backbone' in export(ckpt, out).stdout
    trained = torch.load(ckpt, weights_only=False)['state_dict']
    written = load_file(str(out / 'model.safetensors'))
    backbone = {k[len('backbone.'):]: v for k, v in trained.items()
                if k.startswith('backbone.') and not k.startswith('backbone.out_norms')}
    # The model's weights, head included (the detector's backbone keeps its ImageNet head).
    assert set(written) == set(backbone)
    assert all(torch.equal(written[k], backbone[k]) for k in written)

    torch.manual_seed(0)
    hf_file = tmp_path / 'model.safetensors'
    save_file(cvt_to_huggingface(CvTModel('13').state_dict()), str(hf_file))
    proc = export(hf_file, tmp_path / 'from_hf')
    assert 'cvt-huggingface' in proc.stdout and 'cvt_13' in proc.stdout


def test_a_custom_arch_needs_naming_and_then_loads_everywhere(tmp_path):
    arch = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
                stem_channels=8, fc_channels=32)
    torch.manual_seed(0)
    source = CMTModel(arch, pretrain_img_size=64, num_classes=5).eval()
    torch.save(source.state_dict(), tmp_path / 'mine.pth')
    proc = export(tmp_path / 'mine.pth', tmp_path / 'out', expect_success=False)
    assert proc.returncode == 1
    assert re.search(r'the weights are a custom CMT arch \(depths \[1, 1, 1, 1\], embed_dims '
                     r'\[16, 32, 64, 128\]\), not a row of the cmt table .*give the arch',
                     proc.stderr)
    export(tmp_path / 'mine.pth', tmp_path / 'out', '--arch', json.dumps(arch))
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['model_args'] == dict(arch=arch, pretrain_img_size=[64, 64])
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    backbone = CMTBackbone.from_pretrained(tmp_path / 'out').eval()
    assert AutoModel.from_pretrained(tmp_path / 'out').config.embed_dims == arch['embed_dims']
    with torch.no_grad():
        assert torch.equal(model(X), source(X))
        assert torch.equal(backbone(X).feature_maps[-1],
                           source.forward_intermediates(X, intermediates_only=True)[-1])


def test_bad_inputs_say_what_is_wrong(tmp_path, capsys):
    """The tool's main (what the command runs), in this process."""
    (tmp_path / 'a_file').write_text('x')
    torch.save({'fc.weight': torch.zeros(2, 2)}, tmp_path / 'resnet.pth')
    for args, message in (
            ((tmp_path / 'missing.pth', tmp_path / 'out'), 'not found'),
            ((tmp_path / 'resnet.pth', tmp_path / 'out'), 'cannot recognise the checkpoint'),
            ((tmp_path / 'resnet.pth', tmp_path / 'a_file'), 'is a file; export_pretrained '
                                                              'writes a folder')):
        assert main(list(map(str, args))) == 1
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / 'resnet.pth'), str(tmp_path / 'out'), '--arch', '{bad'])
    assert exit_.value.code == 2 and '--arch is not valid JSON' in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _no_torch_hub_writes(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
