"""``compile`` in a config or as the runner's argument (cvt_mm.engine.compile): the backbone and
neck compiled in place for training and testing through the tools, bad options refused before
training, and compiled training over new input sizes that compiles once more and then reuses
its graph, whichever side of each padding condition a size falls on."""
import copy
import glob
import os.path as osp

import pytest
import torch
from torch import nn

import cvt_mm  # noqa: F401
from cvt_mm.engine.compile import compile_model, compile_options
from cvt_mm.models.cmt import CMT
from cvt_mm.models.cvt import CvT

from helpers import det_user_config, narrow_config, run_tool, seg_user_config

SMALL_CMT = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1],
                 stem_channels=8, fc_channels=32, mlp_ratio=2.0)
SMALL_CVT = dict(embed_dims=[16, 32, 64], num_heads=[1, 2, 4], depths=[1, 1, 1])


class Detector(nn.Module):
    """A backbone and a neck, as the toolboxes' models name them."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone, self.neck = backbone, nn.Identity()


# CMT pads a map to a multiple of 2 before each patch embedding and of its key/value reduction
# (8, 4, 2) before the reduction. 64 and 128 pad nowhere; 98 everywhere (the stem's output 49
# is odd, then the grids 25, 13, 7); 100 everywhere but before the first embedding (50). Each
# padding condition is met and not met by each side in turn.
SIZES = [(64, 96), (98, 100), (128, 64), (100, 98)]


@pytest.mark.parametrize('kind', ['cmt', 'cvt'])
def test_compiled_training_compiles_once_more_for_new_sizes_then_reuses_the_graph(kind):
    """Four input sizes (:data:`SIZES`), BatchNorm training: the first size compiles a static
    graph, the second a dynamic one, the others none; no graph break anywhere (fullgraph=True
    raises at one). Outputs and gradients as the eager model's. Dynamo's guards decide the
    graphs, so the ``eager`` backend counts them for CMT (fake tensors run every op's meta
    kernel, where torch 2.1's SDPA failed); CvT runs through ``aot_eager``, AOT autograd's
    traced backward, as the default backend does (CMT through it took 3.4x the time: 59.4 s
    against 17.5 s, one after the other on the 2-core machine, 2026-12-07)."""
    from torch._dynamo.utils import counters
    torch.manual_seed(0)
    # No drop path: the two models would draw different samples to drop.
    backbone = CMT(arch=SMALL_CMT, num_classes=0, out_indices=(0, 1, 2, 3), drop_path_rate=0.,
                   pretrain_img_size=64) if kind == 'cmt' else \
        CvT(arch=SMALL_CVT, num_classes=0, out_indices=(0, 1, 2), drop_path_rate=0.)
    backbone.init_weights()
    eager = copy.deepcopy(backbone)
    model = Detector(backbone).train()
    torch._dynamo.reset()
    counters.clear()
    backend = 'eager' if kind == 'cmt' else 'aot_eager'
    assert compile_model(model, dict(backend=backend, fullgraph=True)) == ['backbone',
                                                                                'neck']
    graphs = []
    for size in SIZES:
        x = torch.randn(2, 3, *size)
        results = []
        for net in (model.backbone, eager):
            outs = net(x)
            sum(o.float().square().mean() for o in outs).backward()
            results.append(([o.detach() for o in outs],
                            [p.grad.clone() for p in net.parameters() if p.grad is not None]))
            net.zero_grad(set_to_none=True)
        torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=1e-5)
        graphs.append(counters['stats']['unique_graphs'])
    assert graphs == [1, 2, 2, 2] and not counters['graph_break']


def test_options_torch_compile_does_not_take_are_refused_naming_the_allowed():
    with pytest.raises(ValueError, match=r"compile: fullgrph is not an option of "
                                         r"torch.compile in torch .*; allowed: targets, "
                                         r"fullgraph, dynamic, backend"):
        compile_options(dict(fullgrph=True))
    with pytest.raises(ValueError, match='compile must be True, False or a dict'):
        compile_options('inductor')
    assert compile_options(False) is None and compile_options(None) is None
    assert compile_options(True)['targets'] == ('backbone', 'neck')


def test_a_target_the_model_lacks_is_refused_naming_its_parts():
    model = Detector(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="targets names 'head', which Detector does not have; "
                                         "it has: backbone, neck"):
        compile_model(model, dict(backend='eager', targets=('backbone', 'head')))
    classifier = nn.Module()
    classifier.backbone = nn.Linear(2, 2)  # no neck: compile = True compiles the backbone
    assert compile_model(classifier, dict(backend='eager')) == ['backbone']
    assert compile_model(classifier, dict(backend='eager')) == []  # not twice


@pytest.mark.parametrize('base, task', [
    # Narrow CvT models of both tasks (with a neck and without), and a real CMT-S: its model
    # compiles the same in either task (UperNet's was dropped, issue 58's suite budget).
    ('mask_rcnn_cvt13_coco.py', 'det'), ('upernet_cvt13_ade20k.py', 'seg'),
    ('mask_rcnn_cmt_s_coco.py', None)])
def test_compile_in_a_config_trains_and_tests_through_the_tools(base, task, tiny_data,
                                                               tmp_path):
    work = str(tmp_path / 'work')
    options = dict(compile=dict(backend='eager'))
    if base.startswith('mask_rcnn'):
        config = det_user_config(str(tmp_path / 'user.py'), base, osp.join(tiny_data, 'coco'),
                                 work, **options)
    else:
        config = seg_user_config(str(tmp_path / 'user.py'), osp.join(tiny_data, 'ade'), work,
                                 base=base, **options)
    if task:
        config = narrow_config(config, task)
    # UperNet has no neck (MMSegmentation's EncoderDecoder builds none).
    said = 'Compiled (torch.compile, in place): ' + (
        'backbone, neck;' if base.startswith('mask_rcnn') else 'backbone;')
    log = run_tool(['train.py', config], timeout=900, warm=True)
    out = log.stdout + log.stderr
    assert said in out, out[-3000:]
    checkpoint = sorted(glob.glob(osp.join(work, '*.pth')))[-1]
    tested = run_tool(['test.py', config, checkpoint], timeout=900, warm=True)
    out = tested.stdout + tested.stderr
    assert said in out
    assert ('coco/bbox_mAP' if base.startswith('mask_rcnn') else 'mIoU') in out


def test_a_bad_compile_option_stops_the_run_before_training(tiny_data, tmp_path):
    work = tmp_path / 'work'
    config = narrow_config(det_user_config(
        str(tmp_path / 'user.py'), 'mask_rcnn_cvt13_coco.py', osp.join(tiny_data, 'coco'),
        str(work), compile=dict(mode='max-autotune', fullgrph=True)), 'det')
    proc = run_tool(['train.py', config], expect_success=False, warm=True)
    assert proc.returncode != 0
    assert 'compile: fullgrph is not an option of torch.compile' in proc.stdout + proc.stderr
    assert not glob.glob(str(work / '*.pth'))


def test_a_runner_built_with_compile_compiles_as_the_config_key_does_and_refuses_alike(tmp_path):
    """``ExactResumeRunner(compile=...)`` (the argument MMEngine's FlexibleRunner takes) is the
    config's ``compile``: honoured, checked when the runner is built, never ignored."""
    from mmengine.model import BaseModel
    from mmengine.registry import DefaultScope

    from cvt_mm.engine.runner import ExactResumeRunner

    class Toy(BaseModel):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(4, 1)

        def forward(self, inputs, mode='tensor', data_samples=None):
            out = self.backbone(torch.stack(inputs) if isinstance(inputs, list) else inputs)
            return dict(loss=out.square().mean()) if mode == 'loss' else out

    def runner(name, **kwargs):
        DefaultScope.get_instance(f'compile_{name}', scope_name='mmengine')
        return ExactResumeRunner(
            model=Toy(), work_dir=str(tmp_path / name), experiment_name=f'compile_{name}',
            train_dataloader=dict(dataset=[dict(inputs=torch.ones(4))] * 4, batch_size=2,
                                  sampler=dict(type='DefaultSampler', shuffle=False),
                                  collate_fn=dict(type='default_collate')),
            optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
            train_cfg=dict(by_epoch=False, max_iters=2), default_scope='mmengine', **kwargs)

    trained = runner('argument', compile=dict(backend='eager'))
    assert trained.cfg['compile'] == dict(backend='eager')
    trained.train()
    assert trained.model.backbone._compiled_call_impl is not None
    with pytest.raises(ValueError, match='compile: fullgrph is not an option of torch.compile'):
        runner('bad', compile=dict(fullgrph=True))
    with pytest.raises(ValueError, match='compile: fullgrph is not an option'):
        runner('bad_key', cfg=dict(compile=dict(fullgrph=True)))
    with pytest.raises(ValueError, match="compile=True was passed and the config says "
                                         "compile=False; give one of them"):
        runner('both', compile=True, cfg=dict(compile=False))
