"""tools/misc/pch-c++, the compiler mmcv's build runs under (tools/misc/setup_env.sh): on a
small project laid out as mmcv's ops are (units that first include pytorch_cpp_helper.hpp and
pytorch_device_registry.hpp from an -I folder), called as torch's ninja file calls the compiler
(``-MMD -MF``, ``-c`` twice), two units at once: the header is precompiled once, every unit
compiles with it to the object a plain compile gives, and what is not a unit's compile passes
through. The real build's saving is measured, not tested (docs/installation.md)."""
import os
import os.path as osp
import shutil
import subprocess
import textwrap

import pytest

from helpers import ROOT

WRAPPER = osp.join(ROOT, 'tools', 'misc', 'pch-c++')
pytestmark = pytest.mark.skipif(shutil.which('c++') is None, reason='no C++ compiler here')

UNIT = textwrap.dedent('''\
    #include "pytorch_cpp_helper.hpp"
    #include "pytorch_device_registry.hpp"
    int unit_{n}(int x) {{ return helper(x) * {n}; }}
    ''')


def _project(tmp_path):
    common = tmp_path / 'common'
    common.mkdir()
    (common / 'pytorch_cpp_helper.hpp').write_text(
        '#pragma once\n#include <vector>\n#include <map>\n'
        'inline int helper(int x) { std::vector<int> v(x, 1); return (int)v.size(); }\n')
    (common / 'pytorch_device_registry.hpp').write_text('#pragma once\n#include <string>\n')
    for n in (1, 2):
        (tmp_path / f'unit{n}.cpp').write_text(UNIT.format(n=n))
    return ['-O2', '-fPIC', f'-I{common}', '-c']  # torch's cflags end with -c


def test_units_compile_with_one_precompiled_header_to_the_plain_objects(tmp_path):
    flags = _project(tmp_path)
    env = dict(os.environ, CVT_MM_PCH_DIR=str(tmp_path / 'pch'))
    calls = [subprocess.Popen([WRAPPER, '-MMD', '-MF', str(tmp_path / f'unit{n}.o.d'), *flags,
                               '-c', str(tmp_path / f'unit{n}.cpp'), '-o',
                               str(tmp_path / f'unit{n}.o'), '-DEXTRA=1'], env=env)
             for n in (1, 2)]
    assert [c.wait(timeout=300) for c in calls] == [0, 0]
    assert sorted(os.listdir(tmp_path / 'pch')) == [
        'lock', 'mmcv_ops_first_includes.h', 'mmcv_ops_first_includes.h.gch', 'pch.log']
    for n in (1, 2):
        plain = tmp_path / f'plain{n}.o'
        subprocess.run(['c++', *flags, str(tmp_path / f'unit{n}.cpp'), '-o', str(plain),
                        '-DEXTRA=1'], check=True, timeout=300)
        assert (tmp_path / f'unit{n}.o').read_bytes() == plain.read_bytes()
        assert (tmp_path / f'unit{n}.o.d').is_file()  # ninja's dependency file, as asked
    # GCC said it used the header (-Winvalid-pch warns when it cannot).
    proc = subprocess.run([WRAPPER, *flags, str(tmp_path / 'unit1.cpp'), '-o',
                           str(tmp_path / 'again.o'), '-DEXTRA=1', '-Winvalid-pch', '-H'],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and 'mmcv_ops_first_includes.h.gch' in proc.stderr


def test_what_is_not_a_unit_s_compile_passes_through(tmp_path):
    flags = _project(tmp_path)
    env = dict(os.environ, CVT_MM_PCH_DIR=str(tmp_path / 'pch'))
    objects = [str(tmp_path / f'unit{n}.o') for n in (1, 2)]
    for n, obj in zip((1, 2), objects):
        subprocess.run([WRAPPER, *flags, str(tmp_path / f'unit{n}.cpp'), '-o', obj], env=env,
                       check=True, timeout=300)
    library = str(tmp_path / 'lib.so')
    subprocess.run([WRAPPER, '-shared', *objects, '-o', library], env=env, check=True,
                   timeout=300)  # a link
    assert osp.getsize(library) > 0
    version = subprocess.run([WRAPPER, '--version'], env=env, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout == subprocess.run(
        ['c++', '--version'], capture_output=True, text=True).stdout
    (tmp_path / 'plain.c').write_text('int f(void) { return 1; }\n')
    subprocess.run([WRAPPER, '-x', 'c', '-c', str(tmp_path / 'plain.c'), '-o',
                    str(tmp_path / 'plain_c.o')], env=env, check=True, timeout=300)
    assert osp.getsize(tmp_path / 'plain_c.o') > 0
