"""A folder of tools/misc/export_pretrained.py as the Hub serves it: loaded where cvt_mm cannot be
imported (a fresh interpreter whose import of cvt_mm fails), through the code in the folder
(``trust_remote_code=True``): ``AutoModel``, ``AutoModelForImageClassification``, the
backbone's class (``AutoBackbone``'s entry of ``auto_map``) and the image-classification
pipeline give what the package gives from the same weights, at the published sizes of CvT-13
and CMT-S (random weights in the official layouts)."""
import ast
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from transformers import AutoImageProcessor

import cvt_mm  # noqa: F401
from cvt_mm.models import CMT, CMTModel, CvT, CvTModel
from cvt_mm.models.export import export_pretrained

from layouts import cmt_to_official, cvt_to_huggingface, randomized

VARIANTS = {'cvt_13': (CvTModel, CvT, '13', cvt_to_huggingface, 'CvT'),
            'cmt_s': (CMTModel, CMT, 's', cmt_to_official, 'CMT')}

WITHOUT_CVT_MM = textwrap.dedent('''
    import json, sys, torch
    class NoCvtMM:  # as on a machine with transformers alone
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] == 'cvt_mm':
                raise ModuleNotFoundError(f"No module named '{name}'")
    sys.meta_path.insert(0, NoCvtMM())
    from PIL import Image
    from transformers import (AutoImageProcessor, AutoModel, AutoModelForImageClassification,
                              pipeline)
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    folder, family, out = sys.argv[1:4]
    x = torch.load(folder + '.input.pt')
    config = json.load(open(folder + '/config.json'))
    with torch.no_grad():
        classifier = AutoModelForImageClassification.from_pretrained(
            folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        backbone_class = get_class_from_dynamic_module(config['auto_map']['AutoBackbone'],
                                                       folder)
        backbone = backbone_class.from_pretrained(folder).eval()
        result = dict(classes=[type(m).__name__ for m in (classifier, base, backbone)],
                      logits=classifier(x).logits, pooled=base(x).pooler_output,
                      maps=list(backbone(x).feature_maps),
                      backbone_outputs=backbone.out_features)
    pipe = pipeline('image-classification', model=folder, trust_remote_code=True)
    result['top5'] = pipe(Image.open(folder + '.image.png'), top_k=5)
    processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
    keys = ('size', 'crop_pct', 'resample', 'image_mean', 'image_std')
    result['processors'] = [json.loads(json.dumps({k: p.to_dict()[k] for k in keys}))
                            for p in (processor, pipe.image_processor)]
    result['pipeline_id2label'] = {str(k): v for k, v in pipe.model.config.id2label.items()}
    result['cvt_mm_imported'] = sorted(m for m in sys.modules if m.startswith('cvt_mm'))
    torch.save(result, out)
''')


@pytest.fixture(scope='module', params=sorted(VARIANTS))
def exported(request, tmp_path_factory):
    """A folder exported from an official-layout file of random weights, the model it came
    from, an input batch and an image."""
    name = request.param
    model_cls, _, arch, to_layout, _ = VARIANTS[name]
    tmp = tmp_path_factory.mktemp(name)
    model = randomized(model_cls(arch))
    torch.save(to_layout(model.state_dict()), tmp / 'weights.pth')
    folder = tmp / name
    export_pretrained(str(tmp / 'weights.pth'), str(folder))
    x = torch.randn(2, 3, 160, 224, generator=torch.Generator().manual_seed(0))
    torch.save(x, f'{folder}.input.pt')
    rng = np.random.RandomState(0)
    Image.fromarray((rng.rand(240, 300, 3) * 255).astype('uint8')).save(f'{folder}.image.png')
    return name, folder, model, x


def test_a_hub_folder_loads_without_cvt_mm_and_gives_the_package_s_outputs(exported, tmp_path):
    name, folder, model, x = exported
    model_cls, backbone_cls, arch, _, family = VARIANTS[name]
    out = tmp_path / 'result.pt'
    proc = subprocess.run(
        [sys.executable, '-c', WITHOUT_CVT_MM, str(folder), family, str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(_clean_env(), HF_HOME=str(tmp_path / 'hf_home')))
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = torch.load(out)
    assert got['cvt_mm_imported'] == []
    assert got['classes'] == [f'{family}ForImageClassification', f'{family}BaseModel',
                              f'{family}Backbone']
    with torch.no_grad():
        assert torch.equal(got['logits'], model(x))
        assert torch.equal(got['pooled'], model.forward_head(model.forward_features(x),
                                                             pre_logits=True))
        maps = model.forward_intermediates(x, intermediates_only=True)
    assert got['backbone_outputs'] == [f'stage{i}' for i in range(1, len(maps) + 1)]
    assert [torch.equal(a, b) for a, b in zip(got['maps'], maps)] == [True] * len(maps)

    # The preprocessing is preprocessor_config.json's, for AutoImageProcessor and the pipeline
    # alike (transformers 5.25 builds it from config.json, which has timm's keys: the export
    # writes it there too), and the pipeline names classes by config.json's id2label.
    processor = json.loads((folder / 'preprocessor_config.json').read_text())
    expected = {k: processor[k] for k in ('size', 'crop_pct', 'resample', 'image_mean',
                                          'image_std')}
    assert got['processors'] == [expected, expected]
    labels = json.loads((folder / 'config.json').read_text())['id2label']
    assert got['pipeline_id2label'] == labels
    assert {p['label'] for p in got['top5']} <= set(labels.values())

    # The pipeline's top-5: the OpenMMLab backbone's classify() on the folder's preprocessing.
    pixels = AutoImageProcessor.from_pretrained(folder)(
        Image.open(f'{folder}.image.png'), return_tensors='pt')['pixel_values']
    assert pixels.shape[-2:] == (processor['size']['shortest_edge'],) * 2 == (224, 224)
    backbone = backbone_cls(arch, init_cfg=dict(type='Pretrained',
                                                checkpoint=str(folder / 'model.safetensors')))
    backbone.init_weights()
    with torch.no_grad():
        probs = backbone.eval().classify(pixels).softmax(-1)[0]
    top5 = probs.topk(5)
    assert [p['label'] for p in got['top5']] == [labels[str(int(i))] for i in top5.indices]
    assert [p['score'] for p in got['top5']] == pytest.approx(top5.values.tolist(), abs=1e-6)


def test_the_folder_s_files_config_and_model_card(exported):
    name, folder, model, x = exported
    files = sorted(p.name for p in folder.iterdir())
    assert files == ['README.md', 'config.json', 'configuration_cvt_mm.py', 'model.safetensors',
                     'modeling_cvt_mm.py', 'preprocessor_config.json']
    config = json.loads((folder / 'config.json').read_text())
    family = VARIANTS[name][4]
    assert config['auto_map'] == {
        'AutoConfig': f'configuration_cvt_mm.{family}Config',
        'AutoModel': f'modeling_cvt_mm.{family}BaseModel',
        'AutoBackbone': f'modeling_cvt_mm.{family}Backbone',
        'AutoModelForImageClassification': f'modeling_cvt_mm.{family}ForImageClassification'}
    assert config['architectures'] == [f'{family}ForImageClassification']
    assert config['depths'] == model.depths and len(config['id2label']) == 1000
    assert config['id2label']['0'] == 'tench'  # ImageNet's names, as MMPretrain ships them
    imported = set()
    for file in ('modeling_cvt_mm.py', 'configuration_cvt_mm.py'):
        for node in ast.walk(ast.parse((folder / file).read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split('.')[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add('.' * node.level + (node.module or '').split('.')[0])
    assert imported <= {'__future__', 'torch', 'transformers', '.configuration_cvt_mm',
                        'typing', 'math', 'functools', 'json', 'os', 'collections',
                        'contextlib'}, imported
    # The fast paths come along (docs/timm_huggingface.md says so).
    assert 'def sdpa_attention' in (folder / 'modeling_cvt_mm.py').read_text()
    processor = json.loads((folder / 'preprocessor_config.json').read_text())
    # transformers reads the image processor from config.json where timm's keys are (5.25).
    assert {k: config[k] for k in processor} == processor
    cfg = timm.create_model(f'local-dir:{folder}', pretrained=True).pretrained_cfg
    assert processor['size'] == {'shortest_edge': cfg['input_size'][-1]}
    assert (processor['crop_pct'], processor['resample']) == (cfg['crop_pct'], 3)  # bicubic
    assert processor['image_mean'] == list(cfg['mean']) and processor['image_std'] == list(
        cfg['std'])
    card = (folder / 'README.md').read_text()
    meta = card.split('---')[1]
    for line in ('library_name: transformers', 'pipeline_tag: image-classification',
                 'datasets: [imagenet-1k]',
                 f'license: {"apache-2.0" if family == "CvT" else "mit"}'):
        assert line in meta
    assert {'cvt_13': '**81.6 %**', 'cmt_s': '**83.5 %**'}[name] in card


def test_a_folder_that_is_not_empty_is_refused_without_overwrite(exported, tmp_path):
    from cvt_mm.models.export import main
    name, folder, *_ = exported
    target = tmp_path / 'target'
    target.mkdir()
    (target / 'notes.txt').write_text('mine')
    src = folder / 'model.safetensors'
    assert main([str(src), str(target)]) == 1
    assert sorted(p.name for p in target.iterdir()) == ['notes.txt']
    assert main([str(src), str(target), '--overwrite']) == 0
    assert (target / 'notes.txt').read_text() == 'mine' and (target / 'config.json').exists()
    # A folder of the export loads into timm again (local-dir:) and re-exports.
    model = timm.create_model(f'local-dir:{target}', pretrained=True)
    assert model.pretrained_cfg['architecture'] == name


def _clean_env():
    import os
    return {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}


@pytest.fixture(autouse=True)
def _no_torch_hub_writes(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))


def test_the_hub_code_takes_model_code_only_and_one_definition_a_name():
    from cvt_mm.models.remote_code import Bundle, remote_code_files
    with pytest.raises(ValueError, match=r'would need cvt_mm\.checkpoint\.loading, which is not '
                                         r'model code'):
        Bundle([('cvt_mm.models.huggingface', 'CvTPreTrainedModel'),
                ('cvt_mm.checkpoint.loading', 'load_pretrained')])
    bundle = Bundle([('cvt_mm.models.cvt', 'init_weights_official'),
                     ('cvt_mm.models.cmt', 'init_weights_official')])
    with pytest.raises(ValueError, match='would define init_weights_official twice'):
        bundle.render('# header')
    # What the package reads only (other layouts) is a function saying so, not missing.
    bundle = Bundle([('cvt_mm.models.huggingface', 'CvTPreTrainedModel')])
    assert ('cvt_mm.models.huggingface', 'load_hugging_face_cvt') in bundle.order
    assert 'def load_hugging_face_cvt' in remote_code_files('cvt')['modeling_cvt_mm.py']
    namespace = {}
    exec(bundle.source('cvt_mm.models.huggingface', 'load_hugging_face_cvt'), namespace)
    with pytest.raises(NotImplementedError, match='load_hugging_face_cvt needs the cvt_mm '
                                                  'package'):
        namespace['load_hugging_face_cvt']()
