"""The model zoo metadata: model-index.yml and the metafiles load and validate with OpenMMLab's
`modelindex` package, name every config exactly once, and state the FLOPs and parameters of
docs/model_zoo.md, whose table names every config and matches a fresh count (every backbone
through its classification config here; `.dev_scripts/flops_table.py --write` regenerates
them all)."""
import os.path as osp
import re

import pytest
from modelindex.load_model_index import load

import cvt_mm  # noqa: F401
from cvt_mm.apis.flops import get_flops

from helpers import ROOT, load_script

flops_table = load_script(osp.join(ROOT, '.dev_scripts', 'flops_table.py'))


@pytest.fixture(scope='module')
def index():
    return load(osp.join(ROOT, 'model-index.yml'))


@pytest.fixture(scope='module')
def docs_table():
    with open(flops_table.DOCS) as f:
        return flops_table.parse_table(f.read())


# modelindex resolves README paths against the metafile's folder; OpenMMLab's metafiles (and
# ours, and every Config path) are relative to the repository root, where mim and MMPretrain's
# ModelHub resolve them. That one message is checked against the root instead.
README_ERROR = re.compile(r'Path to README file (\S+) is not a valid file\.$')


def test_model_index_validates(index):
    index.build_models_with_collections()  # what load() does for the root; idempotent
    errors = index.check(silent=True)
    readmes = [README_ERROR.search(e) for e in errors]
    assert [e for e, m in zip(errors, readmes) if m is None] == []
    assert all(osp.isfile(osp.join(ROOT, m.group(1))) for m in readmes)
    collections = {c.name for c in index.collections}
    assert collections == {'CvT', 'CMT'}
    for model in index.models:
        assert model.in_collection in collections, model.name
        assert model.name == osp.splitext(osp.basename(model.config))[0]
        full = model.full_model
        assert full.paper['URL'].startswith('https://arxiv.org/abs/'), model.name
        assert osp.isfile(osp.join(ROOT, full.readme)), model.name


def test_every_config_is_in_the_index_exactly_once(index):
    named = [model.config for model in index.models]
    assert sorted(named) == flops_table.list_configs()
    assert all(osp.isfile(osp.join(ROOT, path)) for path in named)


def test_results_are_the_papers_and_say_so(index):
    """No training has been run here: every published result names its source, and no
    status claims a reproduction."""
    for model in index.models:
        meta = model.metadata.data
        status = meta['Status']
        assert status.startswith(('not yet reproduced', 'weights converted')), model.name
        if model.results:
            assert 'paper' in meta['Results From'] or 'official' in meta['Results From']
        else:
            assert 'no published result' in status, model.name


def test_docs_table_names_every_config(docs_table):
    """A new config cannot be left out of docs/model_zoo.md (nor a removed one stay)."""
    assert sorted(docs_table) == flops_table.list_configs()


def test_metafiles_state_the_docs_tables_flops_and_params(index, docs_table):
    for model in index.models:
        meta = model.metadata.data
        assert (meta['FLOPs'], meta['Parameters']) == \
            flops_table.metafile_numbers(docs_table, model.config), model.name


def test_family_readmes_show_their_metafiles(index):
    for meta in flops_table.metafiles():
        with open(osp.join(osp.dirname(meta), 'README.md')) as f:
            text = f.read()
        start, end = (text.index(m) for m in flops_table.ZOO_MARKERS)
        shown = text[start + len(flops_table.ZOO_MARKERS[0]):end].strip()
        assert shown == flops_table.render_zoo_table(meta).strip(), meta
        assert '@InProceedings{' in text


# Every backbone arch with a classification config, at its ImageNet resolution.
CLASSIFICATION_CONFIGS = {
    'configs/imagenet_cmt_ti_800e_in1k.py': (160, '0.6', '9.5'),
    'configs/imagenet_cmt_xs_400e_in1k.py': (192, '1.5', '15.2'),
    'configs/imagenet_cmt_s_300e_in1k.py': (224, '4.04', '25.1'),
    'configs/imagenet_cmt_b_300e_in1k.py': (256, '9.3', '45.7'),
    'configs/imagenet_cvt13_300e_in1k.py': (224, '4.53', '19.98'),
    'configs/imagenet_cvt21_300e_in1k.py': (224, '7.13', '31.54'),
}


def test_every_classification_config_is_counted_here(docs_table):
    assert sorted(CLASSIFICATION_CONFIGS) == sorted(c for c in docs_table if 'imagenet_' in c)


@pytest.mark.parametrize('config', sorted(CLASSIFICATION_CONFIGS))
def test_flops_table_row_is_get_flops_and_the_committed_row(config, capsys, docs_table):
    """Each backbone counted afresh by the table's script (its classification config, at its
    ImageNet resolution: the papers' inputs) equals the committed docs row, beside the
    paper's numbers."""
    side, paper_flops, paper_params = CLASSIFICATION_CONFIGS[config]
    assert flops_table.main([osp.join(ROOT, config)]) == 0
    rows = flops_table.parse_table('\n'.join(
        [flops_table.TABLE_MARKERS[0], capsys.readouterr().out, flops_table.TABLE_MARKERS[1]]))
    row = rows[config]
    assert row['input (H×W)'] == f'{side}×{side}'
    if 'cmt_ti' in config:  # the smallest: the script prints what get_flops counts
        r = get_flops(osp.join(ROOT, config), (side, side), mmcv=True)
        assert float(row['GFLOPs (ours)']) == pytest.approx(r['flops'], abs=0.005)
        assert float(row['GFLOPs (mmcv counter)']) == pytest.approx(r['mmcv_flops'], abs=0.005)
        assert float(row['params M (ours)']) == pytest.approx(r['params'], abs=0.005)
    assert (row['GFLOPs (paper)'], row['params M (paper)']) == (paper_flops, paper_params)
    assert row == docs_table[config]


def test_docs_explain_the_convention_and_how_to_regenerate():
    with open(flops_table.DOCS) as f:
        text = f.read()
    assert 'flops_table.py --write' in text and 'multiply-add' in text
    # The measured account of the CMT-S detection gap is written down.
    assert re.search(r'mask_rcnn_cmt_s_coco.*249', text, re.S)


@pytest.mark.parametrize('argv, message', [
    (['--explain', 'configs/mask_rcnn_cmt_s_coco.py', '--write'], 'no other configs'),
    (['--shape', '800', '1280'], 'only applies to --explain'),
    (['--sync', '--write'], 'counts nothing'),
    (['configs/no_such_config.py'], 'no config file'),
])
def test_flops_table_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        flops_table.parse_args(argv)
    assert message in capsys.readouterr().err
