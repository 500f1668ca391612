"""CvT and CMT as timm models: registered by ``import cvt_mm``, built by ``timm.create_model``
and behaving as timm's own models do (pretrained files of every layout, ``num_classes`` and
``in_chans``, ``features_only`` with a true ``feature_info``, intermediates and pruning,
gradient checkpointing, layer-decay groups, the official preprocessing), with errors that name
what is wrong. Everything runs through timm's own code; the weights are random, stored in the
published layouts (``layouts.py``)."""
import re
import subprocess
import sys
import textwrap

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config
from timm.models import adapt_input_conv

import cvt_mm  # noqa: F401  (registers the timm models)
from cvt_mm.checkpoint import CheckpointError
from cvt_mm.models import CMTModel, CvTModel
from cvt_mm.models.backbone import layer_depth

from helpers import ROOT
from layouts import cmt_to_official, cvt_to_huggingface, cvt_to_official, randomized

NAMES = ['cvt_13', 'cvt_21', 'cvt_w24', 'cmt_ti', 'cmt_xs', 'cmt_s', 'cmt_b']


@pytest.fixture(scope='module')
def cvt13():
    return randomized(CvTModel('13'))


@pytest.fixture(scope='module')
def cmt_ti():
    return randomized(CMTModel('ti'))


def create(name, path, **kwargs):
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                             **kwargs).eval()


X = torch.randn(2, 3, 97, 131, generator=torch.Generator().manual_seed(1))  # any size


def test_every_variant_is_registered_with_its_official_parameter_count():
    assert set(timm.list_models('cvt_*')) | set(timm.list_models('cmt_*')) == set(NAMES)
    counts = {}
    for name in NAMES:
        with torch.device('meta'):
            counts[name] = sum(p.numel() for p in timm.create_model(name).parameters()) / 1e6
    assert counts == pytest.approx({'cvt_13': 19.997, 'cvt_21': 31.623, 'cvt_w24': 277.196,
                                    'cmt_ti': 9.492, 'cmt_xs': 15.247, 'cmt_s': 26.256,
                                    'cmt_b': 45.715}, abs=1e-3)
    assert timm.list_pretrained('cvt_13*') == ['cvt_13.in1k', 'cvt_13.in1k_384',
                                               'cvt_13.in22k_ft_in1k_384']


# The official evaluations: microsoft/CvT at 224 resizes the short side to 256 and crops, at
# 384 resizes to 384 x 384 (no crop); cmt_pytorch resizes the short side to int(256 / 224 x
# size) and crops. Every published tag.
_CVT_384 = (384, 1.0, 'Resize(size=(384, 384),')


@pytest.mark.parametrize('name,size,crop,resize', [
    ('cvt_13', 224, 0.875, 'Resize(size=256,'), ('cvt_13.in1k_384', *_CVT_384),
    ('cvt_13.in22k_ft_in1k_384', *_CVT_384), ('cvt_21', 224, 0.875, 'Resize(size=256,'),
    ('cvt_21.in1k_384', *_CVT_384), ('cvt_21.in22k_ft_in1k_384', *_CVT_384),
    ('cvt_w24.in22k_ft_in1k_384', *_CVT_384),
] + [(name, size, 0.875, f'Resize(size={int(256 / 224 * size)},')
     for name, size in (('cmt_ti', 160), ('cmt_xs', 192), ('cmt_s', 224), ('cmt_b', 256))])
def test_resolve_data_config_gives_the_official_evaluation(name, size, crop, resize):
    with torch.device('meta'):
        model = timm.create_model(name.split('.')[0],
                                  pretrained_cfg=(name.split('.') + [None])[1])
    config = resolve_data_config({}, model=model)
    assert config['input_size'] == (3, size, size) and config['crop_pct'] == crop
    assert config['interpolation'] == 'bicubic'
    assert config['mean'] == (0.485, 0.456, 0.406) and config['std'] == (0.229, 0.224, 0.225)
    text = repr(create_transform(**config))
    assert resize in text and 'bicubic' in text
    assert f'CenterCrop(size=({size}, {size}))' in text  # after squashing: the whole image


def _assert_same(model, reference):
    with torch.no_grad():
        assert torch.equal(model(X), reference(X))


def test_loads_the_official_huggingface_and_our_layouts(tmp_path, cvt13, cmt_ti):
    sd = cvt13.state_dict()
    files = {'CvT-13-224x224-IN-1k.pth': cvt_to_official(sd), 'ours.pth': sd,
             'detector.pth': {'state_dict': {'backbone.' + k: v for k, v in sd.items()}}}
    for name, content in files.items():
        torch.save(content, tmp_path / name)
    save_file(cvt_to_huggingface(sd), str(tmp_path / 'model.safetensors'))
    torch.save(cvt_to_huggingface(sd), tmp_path / 'pytorch_model.bin')
    for name in [*files, 'model.safetensors', 'pytorch_model.bin']:
        _assert_same(create('cvt_13', tmp_path / name), cvt13)
    torch.save({'model': cmt_to_official(cmt_ti.state_dict())}, tmp_path / 'cmt_tiny.pth')
    save_file(cmt_ti.state_dict(), str(tmp_path / 'cmt_ours.safetensors'))
    for name in ('cmt_tiny.pth', 'cmt_ours.safetensors'):
        _assert_same(create('cmt_ti', tmp_path / name), cmt_ti)


def test_num_classes_and_in_chans_as_timm_adapts_them(tmp_path, cvt13, cmt_ti):
    torch.save(cvt_to_official(cvt13.state_dict()), tmp_path / 'cvt.pth')
    model = create('cvt_13', tmp_path / 'cvt.pth', num_classes=7, in_chans=1)
    assert model.head.out_features == 7
    conv = 'stages.0.patch_embed.proj.weight'
    assert torch.equal(model.state_dict()[conv],
                       adapt_input_conv(1, cvt13.state_dict()[conv].clone()))
    # Everything but the head and the first convolution as loaded.
    for key, value in cvt13.state_dict().items():
        if not key.startswith('head.') and key != conv:
            assert torch.equal(model.state_dict()[key], value), key
    torch.save({'model': cmt_to_official(cmt_ti.state_dict())}, tmp_path / 'cmt.pth')
    four = create('cmt_ti', tmp_path / 'cmt.pth', in_chans=4, num_classes=0)
    with torch.no_grad():
        assert four(torch.randn(1, 4, 64, 64)).shape == (1, 1280)  # pre-logits features


@pytest.mark.parametrize('family', ['cvt', 'cmt'])
def test_features_only_gives_the_model_s_intermediates_with_a_true_feature_info(
        tmp_path, cvt13, cmt_ti, family):
    source, name = (cvt13, 'cvt_13') if family == 'cvt' else (cmt_ti, 'cmt_ti')
    torch.save(source.state_dict(), tmp_path / 'w.pth')
    features = create(name, tmp_path / 'w.pth', features_only=True)
    with torch.no_grad():
        maps = features(X)
        expected = source.forward_intermediates(X, intermediates_only=True)
    assert len(maps) == source.num_stages
    for fmap, ref, channels, reduction in zip(maps, expected, features.feature_info.channels(),
                                              features.feature_info.reduction()):
        assert torch.equal(fmap, ref)
        assert fmap.shape[1] == channels
        assert fmap.shape[2] == -(-X.shape[2] // reduction) or family == 'cvt'  # CMT: ceil
    assert features.feature_info.module_name() == [f'stages.{i}' for i in
                                                   range(source.num_stages)]
    # What features_only does not run is not there: no head, no classification stage.
    assert not any(k.startswith(('model.head', 'model.norm.', 'model.cls_proj'))
                   for k in features.state_dict())
    last_two = create(name, tmp_path / 'w.pth', features_only=True, out_indices=(-2, -1))
    with torch.no_grad():
        assert [torch.equal(a, b) for a, b in zip(last_two(X), expected[-2:])] == [True] * 2
    assert len(last_two.model.stages) == source.num_stages  # the last stage is needed


def test_forward_intermediates_head_and_pruning_follow_timm(cvt13, cmt_ti):
    for model in (CvTModel('13'), CMTModel('ti')):
        model.load_state_dict((cvt13 if isinstance(model, CvTModel) else cmt_ti).state_dict())
        model.eval()
        with torch.no_grad():
            logits = model(X)
            final, maps = model.forward_intermediates(X)
            assert torch.equal(model.forward_head(final), logits)
            assert torch.equal(final, model.forward_features(X))
            assert model.forward_head(final, pre_logits=True).shape == \
                (2, model.head_hidden_size)
            only_first = model.forward_intermediates(X, indices=[0], stop_early=True,
                                                     intermediates_only=True)
            assert torch.equal(only_first[0], maps[0])
            taken = model.prune_intermediate_layers([0, 1])
            assert taken == [0, 1] and len(model.stages) == 2
            assert isinstance(model.get_classifier(), torch.nn.Identity)
            pruned = model.forward_intermediates(X, intermediates_only=True)
            assert [torch.equal(a, b) for a, b in zip(pruned, maps[:2])] == [True, True]
    assert CvTModel('13').no_weight_decay() == {'stages.2.cls_token'}
    assert CMTModel('ti').no_weight_decay() == set()  # the official run decays relative_pos
    model = CvTModel('13', num_classes=10)
    model.reset_classifier(3)
    assert model.head.out_features == 3
    with pytest.raises(ValueError, match="global_pool='max' is not supported; allowed: "
                                         "'token', ''"):
        model.reset_classifier(3, 'max')


def test_set_grad_checkpointing_recomputes_each_block_with_the_same_gradients(checkpoint_calls):
    grads = []
    for enable in (False, True):
        torch.manual_seed(0)
        model = timm.create_model('cmt_ti', drop_path_rate=0.0)
        model.set_grad_checkpointing(enable)
        model.train()(torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
                      ).square().mean().backward()
        grads.append([p.grad for p in model.parameters()])
    assert len(checkpoint_calls) == sum(model.depths)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('name', ['cvt_13', 'cmt_ti'])
def test_group_matcher_orders_layer_decay_as_the_openmmlab_backbone_does(name):
    """timm's layer-wise LR decay groups the parameters by depth; every parameter's group is in
    the order of MMPretrain's numbering (``layer_depth``) of the same parameter."""
    from timm.optim import param_groups_layer_decay
    model = timm.create_model(name)
    groups = param_groups_layer_decay(model, weight_decay=0.05, layer_decay=0.75)
    scale_of = {id(p): g['lr_scale'] for g in groups for p in g['params']}
    assert len({round(s, 6) for s in scale_of.values()}) > sum(model.depths) // 2
    pairs = [(layer_depth(n, '', model.depths)[0], scale_of[id(p)])
             for n, p in model.named_parameters()]
    pairs.sort()
    scales = [s for _, s in pairs]
    # Deeper by our numbering is never a smaller LR scale by timm's grouping.
    drops = [i for i in range(1, len(scales)) if scales[i] < scales[i - 1] - 1e-9]
    assert drops == []


def test_bad_checkpoints_and_indices_say_what_is_wrong(tmp_path, cvt13, cmt_ti):
    torch.save({'model': cmt_to_official(cmt_ti.state_dict())}, tmp_path / 'cmt_tiny.pth')
    with pytest.raises(CheckpointError, match=r'a cmt checkpoint \(layout cmt-official\), not a '
                                              r'cvt one.*The model is CvT-13'):
        create('cvt_13', tmp_path / 'cmt_tiny.pth')
    torch.save(cvt_to_official(cvt13.state_dict()), tmp_path / 'cvt13.pth')
    with pytest.raises(CheckpointError, match=r"looks like CvT-13; the model is CvT-21.*"
                                              r"timm.create_model\('cvt_21'\)"):
        create('cvt_21', tmp_path / 'cvt13.pth')
    with pytest.raises(ValueError, match=r'out_indices contains 3, but the model has 3 stages '
                                         r'\(allowed: 0\.\.2 or -3\.\.-1\)'):
        timm.create_model('cvt_13', features_only=True, out_indices=(1, 3))
    with pytest.raises(ValueError, match=r'out_indices=5 \(an int takes the last n stages\) '
                                         r'is out of range.*1\.\.4'):
        timm.create_model('cmt_s', features_only=True, out_indices=5)
    folder = tmp_path / 'no_weights'
    folder.mkdir()
    (folder / 'config.json').write_text('{"architecture": "cvt_13", "pretrained_cfg": {}}')
    with pytest.raises(FileNotFoundError, match='model.safetensors is missing.*In the folder: '
                                                'config.json'):
        timm.create_model(f'local-dir:{folder}', pretrained=True)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_a_name_timm_already_has_stays_timm_s_and_is_said_once():
    proc = _run('''
        import sys, types, warnings
        import timm
        from timm.models import register_model
        theirs = types.ModuleType('timm.models.cvt')
        sys.modules['timm.models.cvt'] = theirs
        def cvt_13(pretrained=False, **kwargs):
            import torch
            model = torch.nn.Identity()
            model.origin = 'timm-own'
            return model
        cvt_13.__module__ = 'timm.models.cvt'
        register_model(cvt_13)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            import cvt_mm
            import importlib
            importlib.reload(cvt_mm.models.cvt)  # registering again: still one warning
        said = [str(w.message) for w in caught if 'cvt_13' in str(w.message)]
        print(len(said), said[0])
        print(timm.create_model('cvt_13').origin, type(timm.create_model('cvt_21')).__name__)
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, message = proc.stdout.splitlines()[0].split(' ', 1)
    assert count == '1'
    assert re.search(r"timm .* already provides a model named 'cvt_13' \(from timm.models.cvt\)"
                     r"; timm's is kept.*cvt_mm.models.cvt.cvt_13\(\)", message)
    assert proc.stdout.splitlines()[1] == 'timm-own CvTModel'


def test_without_timm_import_cvt_mm_works_and_touches_no_timm_state():
    """timm made unimportable (as where it is not installed): the import works, the models
    and the OpenMMLab backbones build, and no timm module is loaded."""
    proc = _run('''
        import sys
        class NoTimm:
            def find_spec(self, name, path=None, target=None):
                if name == 'timm' or name.startswith('timm.'):
                    raise ModuleNotFoundError(f"No module named '{name}'")
        sys.meta_path.insert(0, NoTimm())
        import torch
        import cvt_mm
        from cvt_mm.models import CMT, CvTModel
        print(CvTModel('13', num_classes=3).eval()(torch.randn(1, 3, 64, 64)).shape[-1],
              len(CMT('ti').eval()(torch.randn(1, 3, 64, 64))),
              sorted(m for m in sys.modules if m.split('.')[0] == 'timm'))
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ['3', '4', '[]']
