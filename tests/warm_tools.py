"""Run ``tools/<name>.py ARGS`` as ``python tools/<name>.py ARGS`` would, but in a fork of one
Python process that has imported the stack once.

Why: a ``python tools/train.py`` spends about 9 s importing torch, the three toolboxes and
cvt_mm before its first line of work (``time python tools/train.py --help`` on the 2-core
machine), longer than training a test model for two iterations; the test that trains and
evaluates every model of ``configs/`` starts some sixty such processes.

How: a server process (this file run as a script) imports the stack and never runs a torch op,
so no thread pool exists when it forks (GNU OpenMP is not fork-safe once used). For each
request it forks a child that redirects its output to files, takes the request's working
folder, environment and ``sys.argv``, and runs the tool file as ``__main__`` with
:func:`runpy.run_path`; the exit code is that of ``sys.exit`` (1 after an uncaught exception,
whose traceback goes to the child's stderr).

What it does not cover, and the tests that start ``python tools/...`` afresh do
(:func:`helpers.run_tool`): a cold import (import order, anything read from the environment
at import or process start: ``PYTHONPATH``, glibc's ``MALLOC_*``, ``LD_PRELOAD``, OpenMP's
``OMP_*``, which is why a request cannot set them), and the interpreter's own exit (atexit
handlers, the teardown of threads).
"""
from __future__ import annotations

import json
import os
import os.path as osp
import signal
import subprocess
import sys
import time

# Read once, when the server starts; a request that sets one needs a fresh interpreter.
STARTUP_VARIABLES = ('PYTHONPATH', 'LD_PRELOAD', 'GLIBC_TUNABLES', 'MALLOC_', 'OMP_', 'MKL_')
# In the tools' order: cvt_mm first, which makes the toolboxes importable with the installed
# transformers (cvt_mm/integration.py), then what a run of each toolbox imports.
PRELOAD = ('torch', 'torchvision', 'cvt_mm', 'mmengine.runner', 'mmdet.models', 'mmseg.models',
           'mmpretrain.models', 'pycocotools.coco')


class WarmTools:
    """The client: ``run(script, args, cwd, env, timeout)`` -> ``CompletedProcess``.

    One server per pytest process, started on first use (about 9 s) and stopped by
    :meth:`close`.
    """

    def __init__(self, root: str):
        self.root = root
        self.server = None

    def _start(self):
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(filter(None, (self.root, env.get('PYTHONPATH'))))
        self.server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env)
        ready = self._reply()
        assert ready == {'ready': True}, ready

    def _reply(self) -> dict:
        line = self.server.stdout.readline()
        if not line:
            raise RuntimeError(f'warm_tools: the server ended (exit {self.server.wait()})')
        return json.loads(line)

    def run(self, script: str, args: list, cwd: str, env: dict, timeout: float,
            log_prefix: str) -> subprocess.CompletedProcess:
        changed = sorted(k for k in set(env) | set(os.environ)
                         if k.startswith(STARTUP_VARIABLES) and env.get(k) != os.environ.get(k))
        changed = [k for k in changed if k != 'PYTHONPATH' or
                   env[k].split(os.pathsep)[0] != self.root]
        if changed:
            raise ValueError(f'warm_tools: {changed} are read at process start; run the tool '
                             'in a fresh interpreter (helpers.run_tool) to change them')
        if self.server is None or self.server.poll() is not None:
            self._start()
        out, err = log_prefix + '.stdout', log_prefix + '.stderr'
        request = dict(script=script, args=[str(a) for a in args], cwd=cwd, env=env,
                       stdout=out, stderr=err, timeout=timeout)
        self.server.stdin.write(json.dumps(request) + '\n')
        self.server.stdin.flush()
        done = self._reply()
        with open(out) as f_out, open(err) as f_err:
            stdout, stderr = f_out.read(), f_err.read()
        command = [sys.executable, script, *request['args']]
        if done['timed_out']:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, done['exit'], stdout, stderr)

    def close(self):
        if self.server is not None and self.server.poll() is None:
            self.server.stdin.close()
            self.server.wait(timeout=60)


def _child(request: dict) -> None:
    """In the fork: become ``python SCRIPT ARGS`` run from ``cwd`` with ``env``; never
    returns."""
    code = 1
    try:
        for fd, path in ((1, request['stdout']), (2, request['stderr'])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        sys.stdin = open(0, closefd=False)
        os.chdir(request['cwd'])
        os.environ.clear()
        os.environ.update(request['env'])
        script = request['script']
        sys.argv = [script, *request['args']]
        sys.path[0] = osp.dirname(osp.abspath(script))  # as `python SCRIPT` sets it
        import runpy
        try:
            runpy.run_path(script, run_name='__main__')
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:  # sys.exit('message'): printed, exit 1, as the interpreter does
                print(exit_.code, file=sys.stderr)
        except BaseException:
            import traceback
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _serve() -> None:
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    protocol = sys.stdout
    protocol.write(json.dumps({'ready': True}) + '\n')
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        protocol.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        # The server keeps the time: the client then waits for one reply, and a child past
        # its limit is killed as subprocess.run(timeout=...) kills it.
        deadline = time.monotonic() + request['timeout']
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not done:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        protocol.write(json.dumps({'exit': os.waitstatus_to_exitcode(status),
                                   'timed_out': not done}) + '\n')
        protocol.flush()


if __name__ == '__main__':
    _serve()
