"""Run ``tools/<name>.py ARGS`` as ``python tools/<name>.py ARGS`` would, but in a fork of one
Python process that has imported the stack once.

Why: a ``python tools/train.py`` spends about 9 s importing torch, the three toolboxes and
cvt_mm before its first line of work (``time python tools/train.py --help`` on the 2-core
machine), longer than training a test model for two iterations; the test that trains and
evaluates every model of ``configs/`` starts some sixty such processes.

How: :mod:`multiprocessing`'s fork server does the serving. Its server process, started on
the first request, imports ``PRELOAD`` (``set_forkserver_preload``) and never runs a torch
op; each request is a ``ctx.Process`` forked from it whose target (:func:`_run_request`)
redirects its output to files, takes the request's working folder, environment and
``sys.argv``, and runs the tool file as ``__main__`` with :func:`runpy.run_path`; the exit
code is that of ``sys.exit`` (1 after an uncaught exception, whose traceback goes to the
child's stderr). The client waits with ``join(timeout)`` and kills a child past its limit, as
``subprocess.run(timeout=...)`` does. The server imports ``PRELOAD`` from its own path (the
installed packages: Python 3.11 to 3.13 do not hand it the client's ``sys.path``); each child
is given the client's path before it imports this module to unpickle its target.

Two checks before a child runs its tool, each a ``RuntimeError`` naming the reason:

* the server had one thread when it forked: GNU OpenMP (libgomp) is not fork-safe once a
  parallel region ran (its thread pool does not exist in the child, which then hangs in its
  first parallel op), and a pool shows as threads of the server. A child always has one
  thread right after the fork, so it reads its parent's count (``/proc/<ppid>/status``).
* every ``PRELOAD`` module is already imported: the fork server skips a preload that fails
  to import without a word, and each child would then import it afresh.

What it does not cover, and the tests that start ``python tools/...`` afresh do
(:func:`helpers.run_tool`): a cold import (import order, anything read from the environment
at import or process start: ``PYTHONPATH``, glibc's ``MALLOC_*``, ``LD_PRELOAD``, OpenMP's
``OMP_*``, which is why a request cannot set them), the interpreter's own exit (atexit
handlers, the teardown of threads), and the traces of being a :mod:`multiprocessing` child
(``multiprocessing.parent_process()`` is not None; a pytest started as the ``pytest`` script,
not ``python -m pytest``, has each child import that script as ``__mp_main__``). The child's
start method is reset (unset, as in a fresh interpreter: data loader workers fork, not go
through the fork server) and its process name is ``MainProcess`` again.
"""
from __future__ import annotations

import multiprocessing
import os
import os.path as osp
import subprocess
import sys

# Read once, when the server starts; a request that sets one needs a fresh interpreter.
STARTUP_VARIABLES = ('PYTHONPATH', 'LD_PRELOAD', 'GLIBC_TUNABLES', 'MALLOC_', 'OMP_', 'MKL_')
# In the tools' order: cvt_mm first, which makes the toolboxes importable with the installed
# transformers (cvt_mm/integration.py), then what a run of each toolbox imports.
PRELOAD = ('torch', 'torchvision', 'cvt_mm', 'mmengine.runner', 'mmdet.models', 'mmseg.models',
           'mmpretrain.models', 'pycocotools.coco')
# Folders that pytest puts on sys.path (this one and the test folders below it): a child's
# sys.path leaves them out, as ``python tools/x.py`` has them not.
TESTS = osp.dirname(osp.abspath(__file__))
# A child that refuses to run its tool exits with this code after writing REFUSAL first in its
# stderr (the client then raises RuntimeError with that message).
REFUSED_EXIT = 70
REFUSAL = 'warm_tools refused: '


class WarmTools:
    """The client: ``run(script, args, cwd, env, timeout, log_prefix)`` -> ``CompletedProcess``.

    One fork server per Python process (:mod:`multiprocessing` keeps one), started on first
    use (about 9 s to import ``preload``); it ends when this process does.

    Args:
        root (str): the checkout; a request's ``PYTHONPATH`` may hold it in front of this
            process's own (:func:`helpers.run_tool` puts it there).
        preload (tuple[str, ...]): the modules the server imports once. Defaults to
            ``PRELOAD``. The first ``WarmTools`` of a process to run a request sets them;
            a later one with another list is refused (ValueError).
    """

    def __init__(self, root: str, preload: tuple = PRELOAD):
        self.root = root
        self.preload = tuple(preload)
        self.context = multiprocessing.get_context('forkserver')

    def _refused_variables(self, env: dict) -> list:
        def entries(path):
            return [p for p in (path or '').split(os.pathsep) if p and p != self.root]

        changed = sorted(k for k in set(env) | set(os.environ)
                         if k.startswith(STARTUP_VARIABLES) and env.get(k) != os.environ.get(k))
        # The checkout in front of this process's own path is what the server has anyway.
        return [k for k in changed if k != 'PYTHONPATH' or
                entries(env.get(k)) != entries(os.environ.get(k))]

    def run(self, script: str, args: list, cwd: str, env: dict, timeout: float,
            log_prefix: str) -> subprocess.CompletedProcess:
        """Run ``python script *args`` from ``cwd`` with the environment ``env`` (complete,
        not added to this one's) in a fork of the server; its stdout and stderr go to
        ``log_prefix + '.stdout'`` / ``'.stderr'`` and come back in the result.

        Raises:
            ValueError: ``env`` changes a variable of ``STARTUP_VARIABLES``.
            subprocess.TimeoutExpired: the tool ran longer than ``timeout`` seconds (killed).
            RuntimeError: the server had more than one thread or missed a preload.
        """
        refused = self._refused_variables(env)
        if refused:
            raise ValueError(f'warm_tools: {refused} are read at process start; run the tool '
                             'in a fresh interpreter (helpers.run_tool) to change them')
        _claim_preload(self.context, self.preload)
        out, err = log_prefix + '.stdout', log_prefix + '.stderr'
        request = dict(script=script, args=[str(a) for a in args], cwd=cwd, env=dict(env),
                       stdout=out, stderr=err, preload=self.preload)
        child = self.context.Process(target=_run_request, args=(request, ))
        child.start()
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join()
        exit_code = child.exitcode
        child.close()
        if not osp.exists(out):  # the target opens it first: the child failed before that
            raise RuntimeError(f'warm_tools: the child ended with exit {exit_code} before '
                               f'running {script}; multiprocessing wrote why to the stderr '
                               'of the fork server (this process\'s at its start)')
        with open(out) as f_out, open(err) as f_err:
            stdout, stderr = f_out.read(), f_err.read()
        command = [sys.executable, script, *request['args']]
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        if exit_code == REFUSED_EXIT and stderr.startswith(REFUSAL):
            raise RuntimeError(stderr.strip())
        return subprocess.CompletedProcess(command, exit_code, stdout, stderr)


# The preload list the fork server of this process was (or will be) started with.
_server_preload = None


def _claim_preload(context, preload: tuple) -> None:
    global _server_preload
    if _server_preload is None:
        context.set_forkserver_preload(list(preload))
        _server_preload = preload
    elif _server_preload != preload:
        raise ValueError(f'warm_tools: this process\'s fork server preloads {_server_preload}; '
                         f'another list ({preload}) needs another process')


def _parent_threads() -> int:
    with open(f'/proc/{os.getppid()}/status') as status:
        for line in status:
            if line.startswith('Threads:'):
                return int(line.split()[1])
    raise RuntimeError('warm_tools: no Threads: line in /proc/<ppid>/status')


def _refusal(request: dict) -> str:
    """Why this child must not run the tool ('' when it may)."""
    threads = _parent_threads()
    if threads != 1:
        return (f'the fork server had {threads} threads when it forked this child; GNU OpenMP '
                '(libgomp) is not fork-safe once a parallel region ran (its pool threads are '
                'missing in the child, whose first parallel op hangs): a preload module ran a '
                'torch op or started a thread at import')
    missing = [name for name in request['preload'] if name not in sys.modules]
    if missing:
        return (f'the fork server did not import {missing} (multiprocessing skips a preload '
                "that fails to import; `python -c 'import NAME'` shows why)")
    return ''


def _run_request(request: dict) -> None:
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
        refusal = _refusal(request)
        if refusal:
            sys.stderr.write(REFUSAL + refusal + '\n')
            code = REFUSED_EXIT
            return
        # Undo what being a multiprocessing child set: a fresh interpreter has no start
        # method chosen (MMEngine warns when it replaces one) and is named MainProcess.
        multiprocessing.set_start_method(None, force=True)
        multiprocessing.current_process().name = 'MainProcess'
        os.chdir(request['cwd'])
        os.environ.clear()
        os.environ.update(request['env'])
        script = request['script']
        sys.argv = [script, *request['args']]
        # As `python SCRIPT` with that PYTHONPATH: the script's folder, PYTHONPATH, then the
        # interpreter's own entries (without pytest's test folders and its '' / cwd).
        python_path = [p for p in request['env'].get('PYTHONPATH', '').split(os.pathsep) if p]
        own = [p for p in sys.path if p and p not in python_path
               and p != TESTS and not p.startswith(TESTS + os.sep)]
        sys.path[:] = [osp.dirname(osp.abspath(script)), *python_path, *own]
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
        # Exit here, as the interpreter exits after the script, not through multiprocessing's
        # bootstrap (which would print its own traceback header and join threads).
        os._exit(code)
