"""tests/warm_tools.py: a tool run in a fork of the fork server behaves as ``python tool.py``
would (exit codes, output, working folder, environment, sys.path, timeout), and a server that
has run an OpenMP parallel region is refused before its child can hang.

Each case runs in a fresh interpreter of its own: a process has one fork server, whose preload
list is fixed when it starts (here ``torch`` alone, and a module that runs a parallel torch op
at import), and the test process must not become the server's parent.
"""
import json
import os.path as osp
import subprocess
import sys
import textwrap

from helpers import ROOT

TESTS = osp.join(ROOT, 'tests')

# The tool each request runs: it reports what it sees, then ends as its first argument says.
TOOL = '''
import json, multiprocessing, os, sys, time
print(json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(), marker=os.environ.get('MARKER'),
                      path=sys.path[:2], tests_on_path=any(p.startswith(sys.argv[2])
                                                           for p in sys.path),
                      start_method=multiprocessing.get_start_method(allow_none=True),
                      name=multiprocessing.current_process().name)))
ending = sys.argv[1]
if ending == 'raise':
    raise KeyError('raised by the tool')
if ending == 'message':
    sys.exit('a message of sys.exit')
if ending == 'sleep':
    time.sleep(60)
if ending == 'parallel':
    import torch
    torch.set_num_threads(2)
    print(torch.ones(1 << 22).add_(1).sum().item())
sys.exit(int(ending) if ending.isdigit() else 0)
'''

# The client: one request per ending named on its command line, each result a JSON line.
CLIENT = '''
import json, os, subprocess, sys
sys.path[:0] = [{tests!r}, {folder!r}]
import warm_tools

if __name__ == '__main__':  # the fork server's children import this file as __mp_main__
    preload, tool, endings = sys.argv[1].split(','), sys.argv[2], sys.argv[3:]
    tools = warm_tools.WarmTools({root!r}, preload=tuple(preload))
    env = dict(os.environ, MARKER='from the request',
               PYTHONPATH={root!r} + os.pathsep + os.environ.get('PYTHONPATH', ''))
    for i, ending in enumerate(endings):
        variables = dict(env, OMP_NUM_THREADS='7') if ending == 'omp' else env
        try:
            proc = tools.run(tool, [ending, {tests!r}], {folder!r}, variables,
                             timeout=3 if ending == 'sleep' else 60,
                             log_prefix=os.path.join({folder!r}, f'log{{i}}'))
            result = dict(exit=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
        except (ValueError, RuntimeError, subprocess.TimeoutExpired) as error:
            result = dict(error=type(error).__name__, message=str(error))
        print(json.dumps(result), flush=True)
'''

# Imported by the fork server before it serves: one parallel region, as a torch op at import
# would run it (two threads asked for, so that libgomp starts a pool on any machine).
PARALLEL_REGION_AT_IMPORT = '''
import torch
torch.set_num_threads(2)
torch.ones(1 << 22).add_(1)
'''


def run_client(tmp_path, preload: str, *endings: str, timeout: float = 240) -> list:
    """The results of ``endings`` (one request each) served by a fork server that preloads
    ``preload`` (comma-separated), in a fresh interpreter."""
    tool = tmp_path / 'tool.py'
    tool.write_text(TOOL)
    (tmp_path / 'parallel_region_at_import.py').write_text(PARALLEL_REGION_AT_IMPORT)
    client = tmp_path / 'client.py'
    client.write_text(textwrap.dedent(CLIENT).format(tests=TESTS, folder=str(tmp_path),
                                                     root=ROOT))
    proc = subprocess.run([sys.executable, str(client), preload, str(tool), *endings],
                          capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_a_warm_run_behaves_as_the_tool_run_by_python(tmp_path):
    ok, code, raised, message, slept, omp, parallel = run_client(
        tmp_path, 'torch', '0', '3', 'raise', 'message', 'sleep', 'omp', 'parallel')
    seen = json.loads(ok['stdout'])
    assert ok['exit'] == 0 and ok['stderr'] == ''
    assert seen['argv'] == ['0', TESTS] and seen['cwd'] == str(tmp_path)
    assert seen['marker'] == 'from the request'
    # As `python tool.py`: the tool's folder, then PYTHONPATH; pytest's test folders are not
    # on the path (the client put tests/ there, as pytest does).
    assert seen['path'] == [str(tmp_path), ROOT] and not seen['tests_on_path']
    # Not a multiprocessing child's: no start method chosen yet, the main process's name.
    assert seen['start_method'] is None and seen['name'] == 'MainProcess'
    assert code['exit'] == 3
    assert raised['exit'] == 1 and "KeyError: 'raised by the tool'" in raised['stderr']
    assert 'Traceback (most recent call last)' in raised['stderr']
    assert message['exit'] == 1 and message['stderr'] == 'a message of sys.exit\n'
    assert slept['error'] == 'TimeoutExpired' and 'timed out after 3 seconds' in slept['message']
    assert omp['error'] == 'ValueError' and "['OMP_NUM_THREADS'] are read at process start" \
        in omp['message']
    # The server never ran a parallel region, so the child can run one.
    assert parallel['exit'] == 0 and parallel['stdout'].splitlines()[-1] == str(2.0 * (1 << 22))


def test_a_fork_server_that_ran_a_parallel_region_is_refused(tmp_path):
    """libgomp's pool threads do not exist in a fork, whose first parallel op then hangs:
    measured with the check taken out, this request's child ran until its 20 s timeout."""
    refused, = run_client(tmp_path, 'torch,parallel_region_at_import', 'parallel')
    assert refused['error'] == 'RuntimeError', refused
    assert 'the fork server had' in refused['message']
    assert 'GNU OpenMP (libgomp) is not fork-safe once a parallel region ran' \
        in refused['message']


def test_a_preload_that_does_not_import_is_named(tmp_path):
    refused, = run_client(tmp_path, 'torch,no_such_module_here', '0')
    assert refused['error'] == 'RuntimeError', refused
    assert "did not import ['no_such_module_here']" in refused['message']
