"""CvT and CMT as Hugging Face transformers models, through transformers' own code: the
conventions of its backbones (``stem`` + ``stage{i}`` stage names, ``out_features`` /
``out_indices``, ``channels``, ``BackboneOutput``: what its ``BackboneTesterMixin`` checks,
written here), configs that spell the architecture out (presets, legacy keys, Hugging Face's
own ``CvtConfig``, unknown fields), the three models the Auto classes map to, saving and
loading, and ``import cvt_mm`` without transformers."""
import copy
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import (
    AutoBackbone,
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    CvtConfig,
    CvtForImageClassification,
)
from transformers.backbone_utils import BackboneType
from transformers.modeling_outputs import BackboneOutput

import cvt_mm  # noqa: F401  (registers the Hugging Face classes)
from cvt_mm.models import CMTModel, CvTModel
from cvt_mm.models.huggingface import (
    CMTBackbone,
    CMTBaseModel,
    CMTConfig,
    CMTForImageClassification,
    CvTBackbone,
    CvTBaseModel,
    CvTConfig,
    CvTForImageClassification,
)
from cvt_mm.models.layers import nlc_to_nchw

from helpers import ROOT
from layouts import randomized

TINY_CVT = dict(embed_dims=[16, 32, 48], num_heads=[1, 2, 3], depths=[1, 2, 3])
TINY_CMT = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
                stem_channels=8, fc_channels=32, pretrain_img_size=64)
X = torch.randn(2, 3, 97, 131, generator=torch.Generator().manual_seed(1))
FAMILIES = {
    'cvt': (CvTConfig, CvTBaseModel, CvTForImageClassification, CvTBackbone, CvTModel, TINY_CVT),
    'cmt': (CMTConfig, CMTBaseModel, CMTForImageClassification, CMTBackbone, CMTModel, TINY_CMT),
}


def family_model(family, **kwargs):
    *_, model_cls, arch = FAMILIES[family]
    arch = dict(arch)
    extra = dict(pretrain_img_size=arch.pop('pretrain_img_size')) if family == 'cmt' else {}
    return randomized(model_cls(arch, **extra, **kwargs))


def stem_map(family, model, x):
    """The stem's map, computed here from the model's parts: CvT's first token embedding as a
    map, CMT's convolutional stem."""
    if family == 'cvt':
        return nlc_to_nchw(*model.stages[0].patch_embed(x))
    return model.stem(x)


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_the_backbone_conventions_of_transformers(family):
    """What transformers' BackboneTesterMixin asserts of every backbone it ships, and the maps
    themselves against the family's model."""
    config_cls, _, _, backbone_cls, model_cls, arch = FAMILIES[family]
    n = model_cls.num_stages
    names = ['stem'] + [f'stage{i}' for i in range(1, n + 1)]
    assert config_cls().stage_names == names and len(config_cls().depths) == n
    assert config_cls().out_features == [names[-1]] and config_cls().out_indices == [n]
    assert config_cls(out_features=['stem', 'stage1'], out_indices=[0, 1]).out_indices == [0, 1]
    assert config_cls(out_features=['stage1', 'stage3']).out_indices == [1, 3]
    assert config_cls(out_indices=[0, 2]).out_features == ['stem', 'stage2']
    with pytest.raises(ValueError, match='should correspond to the same stages'):
        config_cls(out_features=['stage1', 'stage2'], out_indices=[0, 2])
    with pytest.raises(ValueError, match='out_features must be a subset of stage_names'):
        config_cls(out_features=[f'stage{n + 1}'])

    config = config_cls(**arch, out_features=names)
    backbone = AutoBackbone.from_config(config).eval()
    assert type(backbone) is backbone_cls and backbone.backbone_type == BackboneType.TRANSFORMERS
    assert list(backbone.forward.__code__.co_varnames[1:2]) == ['pixel_values']
    assert len(backbone.num_features) == len(backbone.stage_names) == n + 1
    model = family_model(family, num_classes=0)
    backbone.model.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        out = backbone(X)
        expected = [stem_map(family, model, X)] + model.forward_intermediates(
            X, intermediates_only=True)
        hidden = backbone(X, output_hidden_states=True).hidden_states
        as_tuple = backbone(X, return_dict=False)
    assert isinstance(out, BackboneOutput) and out.hidden_states is None
    assert [f.shape[1] for f in out.feature_maps] == backbone.channels == backbone.num_features
    assert all(f.is_contiguous() for f in out.feature_maps)
    assert [torch.equal(f, e) for f, e in zip(out.feature_maps, expected)] == [True] * (n + 1)
    assert [torch.equal(h, e) for h, e in zip(hidden, expected)] == [True] * (n + 1)
    assert torch.equal(as_tuple[0][-1], out.feature_maps[-1])
    strides = [X.shape[-1] / f.shape[-1] for f in out.feature_maps]
    assert strides[0] == pytest.approx(4 if family == 'cvt' else 2, rel=0.1)

    # Changing the outputs after construction, as the mixin does: the last stage by default.
    for change in ('out_features', 'out_indices'):
        modified = copy.deepcopy(config)
        setattr(modified, change, None)
        changed = backbone_cls(modified).eval()
        assert changed.channels == [backbone.num_features[-1]]
        assert len(changed(X).feature_maps) == 1
    with pytest.raises(ValueError, match='does not return attention maps'):
        backbone(X, output_attentions=True)


def test_configs_spell_the_architecture_out_with_the_published_variants_as_presets():
    assert CvTConfig().arch_name == '13' and CMTConfig().arch_name == 's'  # as CvtConfig
    assert CvTConfig.from_arch('21').depths == [1, 4, 16]
    assert CvTConfig.from_arch('w24').embed_dims == [192, 768, 1024]
    ti = CMTConfig.from_arch('ti', out_indices=[1, 2])
    assert (ti.arch_name, ti.embed_dims, ti.stem_channels, ti.mlp_ratio, ti.pretrain_img_size) \
        == ('ti', [46, 92, 184, 368], 16, 3.6, 160)
    assert CvTConfig(**TINY_CVT).arch_name is None
    assert CvTConfig().to_dict()['depths'] == [1, 2, 10]
    assert CvTConfig().num_hidden_layers == 3 and CMTConfig().hidden_size == 512
    with pytest.raises(ValueError, match=r"arch='x' is not supported; allowed: '13', '21', 'w24'"):
        CvTConfig.from_arch('x')
    with pytest.raises(ValueError, match=r"unknown fields \['embed_dim'\]; its fields are "
                                         r"\['embed_dims', 'num_heads', 'depths'"):
        CMTConfig(embed_dim=[1, 2, 3, 4])
    with pytest.raises(ValueError, match=r'CvTConfig.depths must hold 3 positive ints, got '
                                         r'\[1, 2\]'):
        CvTConfig(depths=[1, 2])


def test_configs_written_before_the_fields_still_load(tmp_path):
    """The export tool's and save_pretrained's config.json of the earlier classes: ``arch``
    (a row or a dict), ``model_kwargs``, ``fast_paths``, out_indices counted from stage1."""
    old = dict(model_type='cvt_mm_cmt', arch=TINY_CMT | dict(pretrain_img_size=None),
               model_kwargs=dict(pretrain_img_size=[64, 64]), fast_paths=None,
               stage_names=['stage1', 'stage2', 'stage3', 'stage4'],
               out_features=['stage2', 'stage4'], out_indices=[1, 3], num_channels=3,
               drop_path_rate=0.1, architectures=['CMTBackbone'])
    del old['arch']['pretrain_img_size']
    config = CMTConfig.from_dict(old)
    assert config.out_features == ['stage2', 'stage4'] and config.out_indices == [2, 4]
    assert config.embed_dims == TINY_CMT['embed_dims'] and config.pretrain_img_size == [64, 64]
    assert CvTConfig(arch='21').arch_name == '21'
    with pytest.raises(ValueError, match=r"arch key 'window' is not a field"):
        CvTConfig(arch=dict(TINY_CVT, window=7))


def test_hugging_face_s_cvt_config_is_read_and_checked():
    theirs = CvtConfig(embed_dim=[16, 32, 48], depth=[1, 2, 3], num_heads=[1, 2, 3]).to_dict()
    ours = CvTConfig.from_dict(theirs)
    assert (ours.embed_dims, ours.depths, ours.num_heads) == ([16, 32, 48], [1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match=r"CvtConfig.cls_token=\[True, True, True\] is not the "
                                         r'official CvT'):
        CvTConfig.from_dict(dict(theirs, cls_token=[True, True, True]))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_the_base_model_and_the_classifier_compute_the_family_s_model(family):
    config_cls, base_cls, classifier_cls, *_ = FAMILIES[family]
    arch = FAMILIES[family][-1]
    model = family_model(family, num_classes=7)
    classifier = classifier_cls(config_cls(**arch, num_labels=7)).eval()
    assert set(classifier.model.state_dict()) == set(model.state_dict())
    classifier.model.load_state_dict(model.state_dict())
    base = base_cls(config_cls(**arch)).eval()
    base.model.load_state_dict(model.state_dict(), strict=False)
    labels = torch.tensor([3, 5])
    with torch.no_grad():
        logits = model(X)
        out = classifier(X, labels=labels, output_hidden_states=True)
        assert torch.equal(classifier(X).logits, logits)
        pooled = model.forward_head(model.forward_features(X), pre_logits=True)
        base_out = base(X, output_hidden_states=True)
    assert torch.allclose(out.logits, logits, atol=1e-6)
    assert torch.allclose(out.loss, F.cross_entropy(logits, labels), atol=1e-6)
    assert torch.equal(base_out.pooler_output, pooled)
    maps = model.forward_intermediates(X, intermediates_only=True)
    assert torch.equal(base_out.last_hidden_state, maps[-1])
    assert [h.shape[1] for h in base_out.hidden_states] == config_cls(**arch).stage_channels()
    assert 'head.weight' not in base.model.state_dict()


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_a_whole_model_s_weights_load_into_each_auto_class(family, tmp_path):
    """What tools/misc/export_pretrained.py writes: our model's keys without a prefix, head
    included; each Auto class takes what it holds."""
    config_cls, base_cls, classifier_cls, backbone_cls, _, arch = FAMILIES[family]
    model = family_model(family, num_classes=5)
    folder = tmp_path / 'folder'
    config_cls(**arch, num_labels=5, out_indices=[1, 2]).save_pretrained(folder)
    save_file(model.state_dict(), str(folder / 'model.safetensors'))
    with torch.no_grad():
        logits = model(X)
        maps = model.forward_intermediates(X, intermediates_only=True)
    for auto, cls in ((AutoModel, base_cls), (AutoModelForImageClassification, classifier_cls)):
        loaded, info = auto.from_pretrained(folder, output_loading_info=True)
        assert type(loaded) is cls and not info['missing_keys'] and not info['mismatched_keys']
    backbone, info = backbone_cls.from_pretrained(folder, output_loading_info=True)
    assert not info['missing_keys'] and backbone.out_features == ['stage1', 'stage2']
    classifier = AutoModelForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        assert torch.equal(classifier(X).logits, logits)
        assert [torch.equal(a, b) for a, b in zip(backbone.eval()(X).feature_maps, maps)] \
            == [True, True]
    saved = tmp_path / 'saved'
    backbone.save_pretrained(saved)
    assert AutoConfig.from_pretrained(saved).model_type == config_cls.model_type
    again = AutoModel.from_pretrained(saved, config=AutoConfig.from_pretrained(saved))
    assert type(again) is base_cls


@pytest.mark.xfail(strict=True, reason="transformers 5's AutoBackbone.from_pretrained asks the "
                   'Hub whether any name is a repository before it looks for a local folder: '
                   'local folders load through the class (its own ConvNext too)')
def test_autobackbone_from_pretrained_on_a_local_folder(tmp_path):
    CvTBackbone(CvTConfig(**TINY_CVT)).save_pretrained(tmp_path / 'saved')
    AutoBackbone.from_pretrained(str(tmp_path / 'saved'))


def test_hugging_face_s_own_cvt_folders_load(tmp_path):
    """A ``microsoft/cvt-*`` folder as transformers writes it (``CvtForImageClassification``,
    random weights) gives the logits and maps our CvT gives from the same weights. (Not
    transformers' own CvT's: it runs exact GELU where the official weights were trained with
    QuickGELU.)"""
    hf_config = CvtConfig(embed_dim=TINY_CVT['embed_dims'], num_heads=TINY_CVT['num_heads'],
                          depth=TINY_CVT['depths'], num_labels=10)
    torch.manual_seed(0)
    hf = CvtForImageClassification(hf_config).eval()
    hf.save_pretrained(tmp_path / 'cvt-tiny')
    ours = CvTModel(TINY_CVT, num_classes=10).eval()
    ours.load_state_dict(cvt_mm.checkpoint.convert_state_dict(hf.state_dict(), 'cvt')[0])
    backbone = CvTBackbone.from_pretrained(tmp_path / 'cvt-tiny', out_indices=[1, 2, 3])
    classifier = CvTForImageClassification.from_pretrained(tmp_path / 'cvt-tiny')
    with torch.no_grad():
        for a, b in zip(backbone(X).feature_maps, ours.forward_intermediates(
                X, intermediates_only=True)):
            assert torch.equal(a, b)
        assert torch.equal(classifier(X).logits, ours(X))
    # A folder of another model type or arch, and folders without weights, say what is wrong.
    CvTForImageClassification(CvTConfig(**TINY_CVT, num_labels=10)).save_pretrained(
        tmp_path / 'ours')
    with pytest.raises(ValueError, match=r'holds the weights of another architecture: 34 '
                                         r"tensors of CvTForImageClassification\({'embed_dims': "
                                         r"\[16, 32, 48\], 'num_heads': \[1, 2, 3\], 'depths': "
                                         r'\[1, 2, 4\]}\) are not in it'):
        CvTForImageClassification.from_pretrained(
            tmp_path / 'ours', config=CvTConfig(**dict(TINY_CVT, depths=[1, 2, 4]),
                                                num_labels=10))
    CMTBackbone(CMTConfig(**TINY_CMT)).save_pretrained(tmp_path / 'cmt')
    with pytest.raises(ValueError, match=r"holds a 'cvt_mm_cmt' model; CvTBackbone loads "
                                         r"'cvt_mm_cvt' folders \(CvTConfig\) or Hugging Face's"):
        CvTBackbone.from_pretrained(tmp_path / 'cmt')
    with pytest.raises(ValueError, match=r"holds a 'cvt' model; CMTBaseModel loads 'cvt_mm_cmt'"):
        CMTBaseModel.from_pretrained(tmp_path / 'cvt-tiny')
    empty = tmp_path / 'empty'
    hf_config.save_pretrained(empty)
    with pytest.raises(FileNotFoundError, match='neither model.safetensors nor '
                                                'pytorch_model.bin'):
        CvTBackbone.from_pretrained(empty)
    ours_without_weights = tmp_path / 'ours_empty'
    CvTConfig(**TINY_CVT).save_pretrained(ours_without_weights)
    with pytest.raises(OSError, match='no file named model.safetensors'):
        AutoModel.from_pretrained(ours_without_weights)


def test_gradient_checkpointing_enable_recomputes_the_blocks(checkpoint_calls):
    backbone = CvTBackbone(CvTConfig(**TINY_CVT, out_indices=[1, 2, 3]))
    backbone.gradient_checkpointing_enable()
    backbone.train()
    sum(f.mean() for f in backbone(X).feature_maps).backward()
    assert len(checkpoint_calls) == sum(TINY_CVT['depths'])
    assert all(p.grad is not None for p in backbone.parameters())  # nothing unused for DDP


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_set_fast_paths_reaches_every_block_of_the_family_s_model(family):
    """The Hugging Face models take the per-model choice as the family's model does: the
    formulas as written, computing bit for bit what the family's model computes with them."""
    config_cls, *_, backbone_cls, _, arch = FAMILIES[family]
    model = family_model(family).eval()
    backbone = backbone_cls(config_cls(**arch, out_indices=[1, 2])).eval()
    backbone.model.load_state_dict(model.state_dict(), strict=False)
    model.set_fast_paths(False)
    backbone.set_fast_paths(False)
    flags = {m.fast_path for m in backbone.modules() if hasattr(m, 'fast_path')}
    assert flags == {False}
    with torch.no_grad():
        maps = backbone(X).feature_maps
        expected = model.forward_intermediates(X, indices=[0, 1], intermediates_only=True)
    assert all(torch.equal(a, b) for a, b in zip(maps, expected))


def test_without_transformers_import_cvt_mm_works_and_loads_none_of_it():
    proc = subprocess.run([sys.executable, '-c', textwrap.dedent('''
        import sys
        class NoTransformers:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] == 'transformers':
                    raise ModuleNotFoundError(f"No module named '{name}'")
        sys.meta_path.insert(0, NoTransformers())
        import torch, timm
        import cvt_mm
        model = timm.create_model('cmt_ti', features_only=True).eval()
        print(len(model(torch.randn(1, 3, 64, 64))), 'cvt_mm.models.huggingface' in sys.modules,
              sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))
    ''')], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ['4', 'False', '[]']
