""".ci/run's decisions, with a stand-in for make (``CI_MAKE``) instead of the real stacks: every
stack is set up and checked, and a set-up that fails or is too slow, a failing suite and a
stack check that hangs each fail CI, naming what; a hung step's processes are stopped.

The stand-in does what ``FAKE_<target>_<stack>`` says (``ok``, ``fail``, ``sleep N``) and
appends each call to a log. Not covered here: the real set-ups and checks, which CI itself runs.
"""
import os
import os.path as osp
import subprocess
import textwrap

import pytest

from helpers import ROOT

FAKE_MAKE = textwrap.dedent('''\
    #!/usr/bin/env bash
    target=$1; stack=pinned
    for arg in "$@"; do [[ $arg == STACK=* ]] && stack=${arg#STACK=}; done
    key="FAKE_${target//-/_}_${stack}"
    what=${!key:-ok}
    echo "$target $stack $$" >> "$FAKE_LOG"
    case $what in
        ok) exit 0 ;;
        fail) echo "fake $target failed"; exit 2 ;;
        sleep*) sleep ${what#sleep } & echo $! >> "$FAKE_PIDS"; wait; exit 0 ;;
    esac
''')


def _ci(tmp_path, **behaviour):
    fake = tmp_path / 'make'
    fake.write_text(FAKE_MAKE)
    fake.chmod(0o755)
    env = dict(os.environ, CI_MAKE=str(fake), FAKE_LOG=str(tmp_path / 'calls'),
               FAKE_PIDS=str(tmp_path / 'pids'), CI_SETUP_S='3', CI_CHECK_S='3', CI_SUITE_S='3')
    env.update(behaviour)
    proc = subprocess.run(['bash', osp.join(ROOT, '.ci', 'run')], env=env, capture_output=True,
                          text=True, timeout=300)
    calls = (tmp_path / 'calls').read_text().split('\n') if (tmp_path / 'calls').exists() else []
    ran = sorted(' '.join(c.split()[:2]) for c in calls if c)
    return proc.returncode, proc.stdout + proc.stderr, ran


EVERYTHING = ['docs pinned', 'env fork', 'env pinned', 'env prebuilt', 'lint pinned',
              'stack-check fork', 'stack-check prebuilt', 'test pinned']


def test_every_stack_is_set_up_and_checked(tmp_path):
    rc, out, ran = _ci(tmp_path)
    assert rc == 0, out
    assert ran == EVERYTHING
    assert 'ci: passed: every stack set up and checked' in out


@pytest.mark.parametrize('behaviour, says, missing', [
    (dict(FAKE_env_prebuilt='fail'),
     ['cold set-up of stack prebuilt (the three together): FAILED with exit code 2',
      'stack check of prebuilt (not run: its set-up did not finish)'], ['stack-check prebuilt']),
    (dict(FAKE_env_fork='sleep 60'),
     ['cold set-up of stack fork (the three together): FAILED: did not finish within 3 s',
      'stack check of fork (not run: its set-up did not finish)'], ['stack-check fork']),
    (dict(FAKE_env_pinned='fail'),
     ['lint, the docs and the full suite (not run: the pinned stack did not set up)'],
     ['docs pinned', 'lint pinned', 'test pinned']),
    (dict(FAKE_test_pinned='fail'),
     ['the full suite (make test): FAILED with exit code 2'], []),
    (dict(FAKE_stack_check_fork='sleep 60'),
     ['stack check of fork: FAILED: did not finish within 3 s (stopped)'], []),
], ids=['a set-up fails', 'a set-up is too slow', 'the pinned set-up fails',
        'the suite fails', 'a stack check hangs'])
def test_a_step_that_fails_or_does_not_finish_fails_ci(tmp_path, behaviour, says, missing):
    rc, out, ran = _ci(tmp_path, **behaviour)
    assert rc == 1, out
    for line in says:
        assert line in out, out
    assert 'ci: FAILED:' in out and 'ci: passed' not in out
    # What could still run, ran: one stack's failure does not hide another's result.
    assert [c for c in EVERYTHING if c not in ran] == missing, ran
    # A step stopped at its limit leaves nothing running.
    pids = (tmp_path / 'pids').read_text().split() if (tmp_path / 'pids').exists() else []
    for pid in pids:
        assert not osp.exists(f'/proc/{pid}') or 'zombie' in open(f'/proc/{pid}/status').read()
