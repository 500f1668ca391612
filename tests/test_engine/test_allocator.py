"""cvt_mm.engine.allocator: large freed blocks are reused without page faults once
``reuse_freed_memory`` ran, and the user's own allocator choice is left alone."""
import json
import os
import subprocess
import sys

import pytest

from cvt_mm.engine.allocator import reuse_freed_memory

from helpers import ROOT

# A CMT-S stage-1 hidden map at 800x1333 (68 MB: above glibc's largest mmap threshold), its
# GELU computed over and over as a forward does; page faults counted over the last 8 calls,
# per call and page. The first calls may still grow the heap (small allocations land in a
# freed block and split it), so the count starts once it has settled.
PROBE = """
import json, resource, sys, torch
from cvt_mm.engine.allocator import reuse_freed_memory
said = reuse_freed_memory() if sys.argv[1] == 'reuse' else 'not called'
x = torch.randn(1, 256, 200, 334)
for _ in range(8):
    y = torch.nn.functional.gelu(x)
    del y
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    y = torch.nn.functional.gelu(x)
    del y
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps(dict(said=said, faults_per_page=faults / 8 / (x.numel() * 4 // 4096))))
"""


def probe(mode: str, **env) -> dict:
    proc = subprocess.run([sys.executable, '-c', PROBE, mode], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, **env), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc only')
def test_a_large_freed_block_is_reused_without_page_faults():
    default, reused = probe('default'), probe('reuse')
    # By default each 68 MB output is a fresh mmap: every one of its pages faults again.
    assert default['faults_per_page'] > 0.9, default
    assert reused['said'].startswith('reusing freed memory')
    assert reused['faults_per_page'] < 0.05, reused
    # The opt-out really leaves it as it was.
    opted_out = probe('reuse', CVT_MM_MALLOC='system')
    assert opted_out['said'] == 'left alone: CVT_MM_MALLOC=system'
    assert opted_out['faults_per_page'] > 0.9, opted_out


@pytest.mark.parametrize('environ, reason', [
    ({'CVT_MM_MALLOC': 'system'}, 'CVT_MM_MALLOC=system'),
    ({'MALLOC_MMAP_THRESHOLD_': '65536'}, 'MALLOC_MMAP_THRESHOLD_ is set'),
    ({'GLIBC_TUNABLES': 'glibc.malloc.trim_threshold=0'}, 'GLIBC_TUNABLES sets glibc.malloc'),
    ({'LD_PRELOAD': '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2'},
     'LD_PRELOAD names another allocator'),
])
def test_the_users_own_allocator_choice_is_left_alone(environ, reason):
    # Decided from the environment before anything is changed.
    assert reuse_freed_memory(environ) == f'left alone: {reason}'


def test_an_unknown_setting_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"CVT_MM_MALLOC='jemalloc'.*'system', 'reuse'"):
        reuse_freed_memory({'CVT_MM_MALLOC': 'jemalloc'})
