"""One implementation behind three entry points: the same weights and input give the same
logits and the same pyramid, to the last bit, through the OpenMMLab backbone (built from
MMEngine's registry, weights by ``init_cfg``), timm (``create_model`` with the file, and
``features_only``) and Hugging Face (``AutoModelForImageClassification`` and the backbone on
the folder ``tools/misc/export_pretrained.py`` writes, and the same folder through timm's
``local-dir:``)."""
import pytest
import timm
import torch
from mmengine.registry import MODELS
from transformers import AutoModelForImageClassification

import cvt_mm  # noqa: F401  (registers everywhere)
from cvt_mm.models import CMTModel, CvTModel
from cvt_mm.models.export import export_pretrained
from cvt_mm.models.huggingface import AUTO_CLASSES

from layouts import cmt_to_official, cvt_to_official

FAMILIES = {
    'cvt': dict(model=lambda: CvTModel('13'), timm='cvt_13', mm=dict(type='CvT', arch='13'),
                official=cvt_to_official),
    'cmt': dict(model=lambda: CMTModel('ti'), timm='cmt_ti', mm=dict(type='CMT', arch='ti'),
                official=lambda sd: {'model': cmt_to_official(sd)}),
}


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_the_same_logits_and_pyramid_through_all_three(family, tmp_path):
    spec = FAMILIES[family]
    torch.manual_seed(0)
    source = spec['model']().eval()
    with torch.no_grad():  # BatchNorm statistics away from 0 and 1, so they must load too
        for name, t in source.state_dict().items():
            if name.endswith(('running_mean', 'running_var')):
                t.copy_(torch.rand(t.shape) + 0.5)
    path = tmp_path / 'official.pth'
    torch.save(spec['official'](source.state_dict()), path)
    x = torch.randn(2, 3, 97, 131, generator=torch.Generator().manual_seed(1))

    mm = MODELS.build(dict(spec['mm'], init_cfg=dict(type='Pretrained', checkpoint=str(path))))
    mm.init_weights()
    mm.eval()
    overlay = dict(file=str(path))
    timm_model = timm.create_model(spec['timm'], pretrained=True,
                                   pretrained_cfg_overlay=overlay).eval()
    timm_features = timm.create_model(spec['timm'], pretrained=True, features_only=True,
                                      pretrained_cfg_overlay=overlay).eval()
    folder = tmp_path / 'exported'
    export_pretrained(str(path), str(folder))
    hf = AUTO_CLASSES[family]['AutoBackbone'].from_pretrained(folder).eval()
    hf_classifier = AutoModelForImageClassification.from_pretrained(folder).eval()
    from_folder = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()

    with torch.no_grad():
        logits = [source(x), mm.classify(x), timm_model(x), from_folder(x),
                  hf_classifier(x).logits]
        pyramids = [source.forward_intermediates(x, intermediates_only=True), list(mm(x)),
                    timm_features(x), list(hf(x).feature_maps)]
    for other in logits[1:]:
        assert torch.equal(other, logits[0])
    assert len(pyramids[0]) == source.num_stages
    for other in pyramids[1:]:
        assert len(other) == len(pyramids[0])
        for a, b in zip(other, pyramids[0]):
            assert torch.equal(a, b)
    # One set of modules: the three hold the same parameters under the same names.
    names = set(source.state_dict())
    assert set(timm_model.state_dict()) == names
    assert {'model.' + k for k in names if not k.startswith(
        ('head.', 'norm.', 'cls_proj.'))} == set(hf.state_dict())
    assert {'model.' + k for k in names} == set(hf_classifier.state_dict())
