"""Every config's recipe, as MMEngine builds it, against docs/recipes.md; the optimizer
constructor that keeps Mask2Former's backbone norms without weight decay."""
import os.path as osp
import shutil

import pytest
from mmengine.optim import build_optim_wrapper
from torch import nn

import cvt_mm  # noqa: F401  (registers the constructors)
from cvt_mm.apis.recipe import COLUMNS, build_parameter_groups, describe_recipe, parameter_groups

from helpers import ROOT, load_tool, repo_config

# docs/recipes.md's reader and checker are the recipe tool's (the table is the repository's).
_TOOL = load_tool('analysis_tools/recipe')
read_table, check_table = _TOOL.read_table, _TOOL.check_table

TABLE = osp.join(ROOT, 'docs', 'recipes.md')
CONFIGS = sorted(read_table(TABLE))


def test_the_table_has_one_row_for_each_config_and_each_row_a_source():
    import glob
    on_disk = sorted(osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'configs', '*.py')))
    assert CONFIGS == on_disk
    assert all(row['source'] for row in read_table(TABLE).values())


@pytest.mark.parametrize('config', CONFIGS)
def test_each_config_builds_the_recipe_its_row_states(config):
    row = read_table(TABLE)[config]
    actual = describe_recipe(osp.join(ROOT, config))
    assert {c: row[c] for c in COLUMNS} == actual


def _groups(cfg):
    _, params, optimizer = build_parameter_groups(cfg)
    return params, optimizer.defaults


def test_mask2former_backbone_norms_get_no_decay_and_the_backbone_lr():
    params, defaults = _groups(repo_config('configs/mask2former_cvt13_coco.py'))
    norms = [p for p in params if p['backbone'] and p['kind'] == 'norms']
    assert len(norms) == 142  # the trainable ones: the classification stage's norm is frozen
    assert all(p['weight_decay'] == 0 and p['lr'] == pytest.approx(0.1 * defaults['lr'])
               for p in norms)
    weights = [p for p in params if p['backbone'] and p['kind'] == 'weights']
    assert all(p['weight_decay'] == defaults['weight_decay'] for p in weights)


def test_the_check_catches_mask2former_as_it_was(tmp_path):
    # The config before the fix: MMEngine's default constructor under the base's 'backbone'
    # key (decay_mult=1), which overrides norm_decay_mult.
    cfg = repo_config('configs/mask2former_cvt13_coco.py')
    cfg.optim_wrapper.pop('constructor')
    cfg.optim_wrapper.paramwise_cfg.custom_keys.backbone = dict(lr_mult=0.1, decay_mult=1.0)
    params, _ = _groups(cfg)
    norms = [p for p in params if p['backbone'] and p['kind'] == 'norms']
    assert len(norms) == 142 and all(p['weight_decay'] > 0 for p in norms)
    path = tmp_path / 'mask2former_cvt13_coco.py'
    cfg.dump(str(path))
    row = read_table(TABLE)['configs/mask2former_cvt13_coco.py']
    assert describe_recipe(str(path))['no weight decay'] != row['no weight decay']


def test_a_changed_cell_a_missing_row_and_a_missing_source_are_reported(tmp_path):
    table = tmp_path / 'recipes.md'
    shutil.copy(TABLE, table)
    text = table.read_text()
    sem_fpn = 'configs/sem_fpn_cvt13_ade20k.py'
    line = next(x for x in text.splitlines() if x.startswith(f'| `{sem_fpn}`'))
    changed = line.replace('32 (8×4)', '16 (8×2)')
    mask_rcnn = next(x for x in text.splitlines()
                     if x.startswith('| `configs/mask_rcnn_cvt13_coco.py`'))
    no_source = mask_rcnn[:mask_rcnn.rstrip(' |').rindex('|')] + '|  |'
    table.write_text(text.replace(line, changed).replace(mask_rcnn, no_source))
    problems = check_table(str(table), [sem_fpn, 'configs/mask_rcnn_cvt13_coco.py',
                                        'configs/retinanet_cvt13_coco.py'])
    assert f"{sem_fpn}: batch: the table says '16 (8×2)', the config gives '32 (8×4)'" \
        in problems
    assert 'configs/mask_rcnn_cvt13_coco.py: the row names no source' in problems
    assert not any(p.startswith('configs/retinanet_cvt13_coco.py') for p in problems)
    rows_elsewhere = [p for p in problems if 'no such config' in p]
    assert len(rows_elsewhere) == len(CONFIGS) - 3


def test_a_config_whose_scaled_lr_base_is_not_its_batch_is_refused(tmp_path):
    cfg = repo_config('configs/mask_rcnn_cvt13_coco.py')
    cfg.auto_scale_lr.base_batch_size = 15
    path = tmp_path / 'odd.py'
    cfg.dump(str(path))
    with pytest.raises(ValueError, match='base_batch_size=15 must be a multiple of the '
                                         'per-GPU batch 2'):
        describe_recipe(str(path))


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.BatchNorm1d(4))
        self.head = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))


@pytest.mark.parametrize('constructor', ['DefaultOptimWrapperConstructor',
                                         'NormDecayOptimWrapperConstructor'])
def test_norm_decay_constructor_applies_norm_decay_under_a_key_without_decay_mult(constructor):
    model = _Model()
    wrapper = build_optim_wrapper(model, dict(
        type='OptimWrapper', constructor=constructor,
        optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.5),
        paramwise_cfg=dict(norm_decay_mult=0., custom_keys={
            'backbone': dict(lr_mult=0.1), 'head.1.bias': dict(decay_mult=2.0)})))
    got = {p['name']: (p['lr'], p['weight_decay'])
           for p in parameter_groups(model, wrapper.optimizer)}
    ours = constructor == 'NormDecayOptimWrapperConstructor'
    for name in ('backbone.1.weight', 'backbone.1.bias', 'backbone.2.weight'):
        assert got[name] == (pytest.approx(0.1), 0.0 if ours else 0.5)
    assert got['backbone.0.weight'] == (pytest.approx(0.1), 0.5)  # not a norm
    assert got['head.1.weight'] == (1.0, 0.0)  # no key: norm_decay_mult either way
    assert got['head.1.bias'] == (1.0, 1.0)  # a key's own decay_mult stays


def test_the_tool_prints_a_config_s_recipe(capsys):
    main = load_tool('analysis_tools/recipe').main
    assert main([osp.join(ROOT, 'configs/retinanet_cmt_s_coco.py')]) == 0
    out = capsys.readouterr().out
    assert '  optimizer: AdamW lr 0.0001 wd 0.0001\n' in out
    assert '  no weight decay: norms, rel-pos\n' in out
