"""Checkpoints by URL: real HTTP over 127.0.0.1, the torch hub cache in a temporary folder.

A small server in a thread serves what each test puts in ``server.files`` and counts the
requests; nothing of the network layer is mocked. Covered: download once then cache hit,
SHA-256 match / mismatch, a transfer cut short, 404, an HTML page, a backbone's
``init_cfg`` URL, MMEngine's ``load_checkpoint`` and Runner ``load_from`` with a URL, safe
loading of a downloaded file, the download tool end to end, and docs/checkpoints.md's table
against ``weights.PUBLISHED``.
"""
import collections
import hashlib
import io
import os.path as osp
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

import cvt_mm
from cvt_mm import checkpoint as weights
from cvt_mm.checkpoint import CheckpointError, read_checkpoint
from cvt_mm.checkpoint.hub import DownloadError, cache_name, cached_download
from cvt_mm.models import CMT

from helpers import ROOT

TINY_CMT = dict(embed_dims=[8, 16, 32, 64], num_heads=[1, 2, 4, 8], depths=[1, 1, 1, 1])
TINY_CVT = dict(embed_dims=[8, 16, 32], num_heads=[1, 2, 4], depths=[1, 1, 1])


class _Handler(BaseHTTPRequestHandler):
    """GET: the bytes of ``server.files[path]``; ``/cut/...`` announces its whole length and
    closes after half; ``.html`` paths are sent as text/html; anything else is a 404."""

    def do_GET(self):  # noqa: N802 - http.server's naming
        server = self.server
        path = self.path.split('?')[0]
        with server.lock:
            server.requests[path] += 1
        data = server.files.get(path)
        if data is None:
            self.send_error(404, 'Not Found')
            return
        self.send_response(200)
        self.send_header('Content-Type',
                         'text/html' if path.endswith('.html') else 'application/octet-stream')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        if path.startswith('/cut/'):
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture(scope='module')
def server():
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), _Handler)
    httpd.daemon_threads = True
    httpd.files, httpd.requests, httpd.lock = {}, collections.Counter(), threading.Lock()
    httpd.base = f'http://127.0.0.1:{httpd.server_address[1]}'
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The torch hub cache in a temporary folder (restored afterwards): nothing touches the
    user's ~/.cache/torch."""
    monkeypatch.setattr(torch.hub, '_hub_dir', getattr(torch.hub, '_hub_dir', None))
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    torch.hub.set_dir(str(tmp_path / 'hub'))
    return tmp_path / 'hub' / 'checkpoints'


def _bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@pytest.fixture(scope='module')
def tiny_cmt():
    torch.manual_seed(0)
    return CMT(arch=TINY_CMT, pretrain_img_size=64, num_classes=10)


def _leftovers(folder):
    """The files in ``folder`` (the hub's lock files, in .locks/, aside)."""
    return sorted(p.name for p in folder.iterdir() if p.name != '.locks') \
        if folder.exists() else []


def test_downloads_once_then_reads_from_the_cache(server, cache, tiny_cmt):
    server.files['/w/once.pth'] = _bytes(tiny_cmt.state_dict())
    url = server.base + '/w/once.pth'
    first = read_checkpoint(url, 'cmt')
    second = read_checkpoint(url, 'cmt')
    assert server.requests['/w/once.pth'] == 1  # the second read is a cache hit
    assert torch.equal(first['stages.0.relative_pos'], second['stages.0.relative_pos'])
    assert (cache / 'once.pth').read_bytes() == server.files['/w/once.pth']
    assert _leftovers(cache) == ['once.pth']


def test_sha256_match_and_mismatch(server, cache):
    data = _bytes({'w': torch.arange(1000.)})
    server.files['/w/hashed.pth'] = data
    url = server.base + '/w/hashed.pth'
    wrong = '0' * 64
    with pytest.raises(DownloadError) as err:
        cached_download(url, sha256=wrong, progress=False)
    message = str(err.value)
    actual = hashlib.sha256(data).hexdigest()
    assert f'{url}: SHA-256 mismatch: expected {wrong}, received {actual}' in message
    assert 'nothing was saved' in message
    assert _leftovers(cache) == []  # neither the file nor a .part
    path = cached_download(url, sha256=actual, progress=False)
    assert path == str(cache / 'hashed.pth') and open(path, 'rb').read() == data
    # a cached file is checked again against the hash it is asked for
    with pytest.raises(DownloadError, match=r'cached copy .* has SHA-256 .*Delete it'):
        cached_download(url, sha256='f' * 64)


def test_a_transfer_cut_short_leaves_nothing(server, cache):
    data = _bytes({'w': torch.randn(4096)})
    server.files['/cut/big.pth'] = data
    url = server.base + '/cut/big.pth'
    with pytest.raises(DownloadError) as err:
        read_checkpoint(url)
    assert f'download of {url} was cut short: received {len(data) // 2} of {len(data)} ' \
           'bytes' in str(err.value)
    assert isinstance(err.value, CheckpointError)  # callers catching CheckpointError see it
    assert _leftovers(cache) == []


def test_404_names_the_url_and_status(server, cache):
    url = server.base + '/w/missing.pth'
    with pytest.raises(DownloadError) as err:
        read_checkpoint(url, 'cmt')
    assert f'cannot download {url}: HTTP 404' in str(err.value)
    assert 'there is no file at this URL' in str(err.value)
    assert _leftovers(cache) == []


def test_an_html_page_is_not_cached(server, cache):
    server.files['/w/share.html'] = b'<!DOCTYPE html><html><body>Sign in</body></html>'
    with pytest.raises(DownloadError, match='returned an HTML page'):
        cached_download(server.base + '/w/share.html')
    assert _leftovers(cache) == []


def test_a_downloaded_file_is_read_safely(server, cache, capsys):
    class Payload:
        def __reduce__(self):
            return (print, ('payload executed', ))

    from mmengine.runner import load_checkpoint
    server.files['/w/evil.pth'] = _bytes({'w': torch.ones(2), 'x': Payload()})
    with pytest.raises(CheckpointError, match='holds pickled Python objects'):
        read_checkpoint(server.base + '/w/evil.pth')
    # MMEngine's own http loader (torch.hub, weights_only=False) would have run the payload;
    # the tools replace it
    cvt_mm.setup_process()
    with pytest.raises(CheckpointError, match='holds pickled Python objects'):
        load_checkpoint(torch.nn.Linear(2, 1), server.base + '/w/evil.pth')
    assert 'payload executed' not in capsys.readouterr().out


def test_backbone_init_cfg_with_a_url_gets_the_served_weights(server, cache, tiny_cmt):
    from mmengine.registry import MODELS
    server.files['/w/tiny_cmt.pth'] = _bytes(tiny_cmt.state_dict())
    url = server.base + '/w/tiny_cmt.pth'
    backbone = MODELS.build(dict(type='CMT', arch=TINY_CMT, pretrain_img_size=64,
                                 num_classes=10,
                                 init_cfg=dict(type='Pretrained', checkpoint=url)))
    backbone.init_weights()
    for key, value in tiny_cmt.state_dict().items():
        assert torch.equal(backbone.state_dict()[key], value), key


class _Detector(torch.nn.Module):
    """What MMEngine's checkpoints wrap: a model with the backbone under ``backbone.``."""

    def __init__(self):
        super().__init__()
        self.backbone = CMT(arch=TINY_CMT, pretrain_img_size=64, num_classes=10)


def test_mmengine_load_checkpoint_and_load_from_with_a_url(server, cache, tiny_cmt, tmp_path):
    from mmengine.runner import Runner, load_checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader
    source = _Detector()
    source.backbone.load_state_dict(tiny_cmt.state_dict())
    server.files['/w/epoch_12.pth'] = _bytes({'state_dict': source.state_dict(),
                                              'meta': {'epoch': 12}})
    url = server.base + '/w/epoch_12.pth'
    cvt_mm.setup_process()  # as the tools do
    assert CheckpointLoader._get_checkpoint_loader(url) is weights.load_from_http

    model = _Detector()
    ckpt = load_checkpoint(model, url, map_location='cpu')
    assert ckpt['meta']['epoch'] == 12
    assert torch.equal(model.state_dict()['backbone.stages.0.relative_pos'],
                       tiny_cmt.state_dict()['stages.0.relative_pos'])

    # load_from in a Runner, as tools/test.py sets it; tools/test.py's fit check too
    runner = Runner(model=_Detector(), work_dir=str(tmp_path / 'work'), load_from=url)
    runner.load_or_resume()
    for key, value in source.state_dict().items():
        assert torch.equal(runner.model.state_dict()[key], value), key
    assert weights.checkpoint_misfit(_Detector(), url) is None
    assert server.requests['/w/epoch_12.pth'] == 1  # three loads, one download


def test_cache_names_keep_hugging_face_repositories_apart():
    hf = 'https://huggingface.co/microsoft/{}/resolve/{}/pytorch_model.bin'
    names = {cache_name(hf.format(repo, 'main')) for repo in ('cvt-13', 'cvt-21')}
    assert names == {'microsoft--cvt-13--pytorch_model.bin',
                     'microsoft--cvt-21--pytorch_model.bin'}
    assert cache_name(hf.format('cvt-13', 'abc123')) == \
        'microsoft--cvt-13--abc123--pytorch_model.bin'
    assert cache_name('https://github.com/ggjy/CMT.pytorch/releases/download/release-v1/'
                      'cmt_small.pth?raw=1') == 'cmt_small.pth'
    with pytest.raises(DownloadError, match='names no file'):
        cache_name('https://example.org/models/')


def test_other_url_schemes_still_say_what_to_do():
    with pytest.raises(CheckpointError, match=r'is a URL; download the file first.*only '
                                              r'http:// and https://'):
        read_checkpoint('s3://bucket/cmt_small.pth', 'cmt')


# ----------------------------------------------------------------------------- the tool
@pytest.fixture(scope='module')
def tool():
    from helpers import load_tool
    return load_tool('misc/download_checkpoints')


def _serve_release(server, tiny_cmt):
    """The hosts' paths on the local server: a tiny CMT as cmt_small.pth, a tiny CvT as
    microsoft/cvt-13's pytorch_model.bin, another file where cvt-13-384's hash is known."""
    from cvt_mm.models import CvT
    torch.manual_seed(1)
    cvt = CvT(arch=TINY_CVT, num_classes=10)
    files = {
        '/ggjy/CMT.pytorch/releases/download/release-v1/cmt_small.pth':
            _bytes(tiny_cmt.state_dict()),
        '/microsoft/cvt-13/resolve/main/pytorch_model.bin': _bytes(cvt.state_dict()),
        '/microsoft/cvt-13-384/resolve/main/pytorch_model.bin': _bytes(cvt.state_dict()),
    }
    server.files.update(files)
    return files


def test_download_tool_end_to_end(server, cache, tiny_cmt, tool, tmp_path, capsys):
    files = _serve_release(server, tiny_cmt)
    out = tmp_path / 'checkpoints'
    args = ['cmt-small', 'cvt-13', '--out', str(out), '--base-url', server.base,
            '--no-progress']
    assert tool.main(args) == 0
    printed = capsys.readouterr().out
    assert 'OneDrive' in printed and 'by hand' in printed  # says it is not the authors' file
    assert (out / 'cmt_small.pth').read_bytes() == \
        files['/ggjy/CMT.pytorch/releases/download/release-v1/cmt_small.pth']
    assert (out / 'CvT-13-224x224-IN-1k.pth').read_bytes() == \
        files['/microsoft/cvt-13/resolve/main/pytorch_model.bin']
    assert sorted(p.name for p in out.iterdir()) == ['CvT-13-224x224-IN-1k.pth',
                                                     'cmt_small.pth']
    # what the configs then load: the file under the name they expect
    from mmengine.registry import MODELS
    backbone = MODELS.build(dict(type='CMT', arch=TINY_CMT, pretrain_img_size=64,
                                 num_classes=10, init_cfg=dict(
                                     type='Pretrained', checkpoint=str(out / 'cmt_small.pth'))))
    backbone.init_weights()
    # a second run keeps the files: no request
    before = sum(server.requests.values())
    assert tool.main(args + ['--list']) == 0
    listed = capsys.readouterr().out
    assert 'cmt-small' in listed and 'MIT' in listed and server.base + '/ggjy/' in listed
    assert 'cvt-21' not in listed  # only the selection
    assert tool.main(args) == 0
    assert 'already there' in capsys.readouterr().out
    assert sum(server.requests.values()) == before


def test_download_tool_refuses_a_file_with_another_hash(server, tiny_cmt, tool, tmp_path,
                                                        capsys):
    _serve_release(server, tiny_cmt)
    out = tmp_path / 'checkpoints'
    assert tool.main(['cvt-13-384', '--out', str(out), '--base-url', server.base]) == 1
    err = capsys.readouterr().err
    known = weights.published_by_name('cvt-13-384').sha256
    assert f'SHA-256 mismatch: expected {known}' in err
    assert _leftovers(out) == []


def test_download_tool_lists_everything_and_rejects_bad_arguments(tool, capsys, monkeypatch):
    assert tool.main(['--list']) == 0
    listed = capsys.readouterr().out
    for entry in weights.PUBLISHED:
        assert entry.name in listed and entry.url in listed
    monkeypatch.setenv(tool.BASE_URL_ENV, 'https://mirror.example.org/models/')
    assert tool.main(['--list', 'cmt-base']) == 0
    assert 'https://mirror.example.org/models/ggjy/CMT.pytorch/releases/download/release-v1/' \
           'cmt_base.pth' in capsys.readouterr().out
    monkeypatch.delenv(tool.BASE_URL_ENV)
    with pytest.raises(SystemExit):
        tool.main(['cmt-huge'])
    err = capsys.readouterr().err
    assert "'cmt-huge' matches no published checkpoint; allowed: cvt-13," in err
    with pytest.raises(SystemExit):
        tool.main(['*', '--base-url', 'ftp://mirror'])
    assert '--base-url must start with http:// or https://' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main([])
    assert 'name the checkpoints to download' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(['cmt-xs', '--markdown'])
    assert '--markdown goes with --list' in capsys.readouterr().err


def test_docs_table_matches_the_python_table(tool):
    """docs/checkpoints.md carries the table `--list --markdown` prints: they cannot drift."""
    doc = open(osp.join(ROOT, 'docs', 'checkpoints.md')).read()
    generated = tool.markdown_table(weights.PUBLISHED)
    assert generated in doc, 'regenerate it: python tools/misc/download_checkpoints.py ' \
                             '--list --markdown'
    rows = [line for line in doc.splitlines() if re.match(r'\| `(cvt|cmt)-', line)]
    assert len(rows) == len(weights.PUBLISHED)
