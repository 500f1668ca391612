"""Faults at random moments (issue 59): a two-process training run under tools/dist_train.sh
with MAX_RESTARTS, into which faults are injected at random times drawn from a seed, and
which must still end bit for bit as the uninterrupted run of the same config.

    python tests/soak.py --faults 50 --seed 0 --task both --out work_dirs/soak
    make soak FAULTS=50 SEED=0

The faults (each round of five takes every kind once, in a seeded order):

* ``rank``: SIGKILL of one rank (torchrun restarts the job, which resumes by itself);
* ``worker``: SIGKILL of one data worker of one rank (its rank fails; torchrun restarts);
* ``write``: SIGKILL of rank 0 while it writes a checkpoint (the moment its temporary file
  exists; the training processes pause there, ``CVT_MM_TEST_WRITE_PAUSE``);
* ``launcher``: SIGKILL of torchrun, then the user's ``--resume`` once every process ended;
* ``job``: SIGTERM to the launcher's process group (the preemption path: exit 75), then
  ``--resume``.

Each fault comes a random delay after the previous (re)start: uniform up to the reference
run's start-up plus eight iterations, so that faults land in start-ups, iterations, saves,
validations and restarts alike. After every fault every ``.pth`` of the work dir must load;
after a launcher's or a job's end no process the soak started may be left; at the end the
final checkpoint's weights, optimizer state, schedulers, every rank's random states and the
data position must equal the uninterrupted run's, and no checkpoint may be damaged or left
partial. The soak makes itself the child subreaper of what it starts, so an orphaned process
stays countable, and kills only processes it started, by pid.

It prints the figure (faults by kind, restarts, iterations redone, time lost, tensors
differing, damaged checkpoints) and writes it as JSON (``--json``); it exits 1 when a check
fails. The same seed gives the same faults, delays and targets (the moments they land at
still depend on the machine's speed)."""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import os.path as osp
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))  # the tests' helpers

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cvt_mm.checkpoint import read_checkpoint  # noqa: E402
from cvt_mm.checkpoint.io import _PART_WRITER as PART_WRITER  # noqa: E402

from cluster_runs import (  # noqa: E402
    alive,
    children,
    exact_config,
    launcher_pid,
    local_rank,
    make_cluster_data,
    start,
)
from helpers import free_port  # noqa: E402

KINDS = ('rank', 'worker', 'write', 'launcher', 'job')
DESCRIPTIONS = dict(rank='SIGKILL of one rank', worker='SIGKILL of one data worker',
                    write='SIGKILL of rank 0 writing a checkpoint',
                    launcher='SIGKILL of torchrun, then --resume',
                    job='SIGTERM to the whole job, then --resume')
MOMENTS = {'start-up': "a (re)start, before its first iteration",
           'training': 'training (iterations, saves, validation)',
           'checkpoint write': 'a checkpoint write',
           'between attempts': "torchrun's restart, no rank running"}
ITERATIONS_PER_EPOCH = 3  # cluster_runs.make_cluster_data with two processes
WRITE_PAUSE = 0.3  # seconds a training process holds a written temporary file
END_TIMEOUT = 300  # seconds for a job's processes to end after its launcher's or job's fault
STALL_TIMEOUT = 600  # seconds without a new iteration or launch before the soak gives up


# ----------------------------------------------------------------------------- processes
def become_subreaper() -> None:
    """Orphans of the processes this one starts become its children (Linux), not init's."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_CHILD_SUBREAPER)')


def _state(pid: int) -> str:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return ''


def descendants(root: int = None) -> list:
    """Living (not zombie) processes under ``root`` (default: this process)."""
    found, todo = [], [root or os.getpid()]
    while todo:
        for pid in children(todo.pop()):
            todo.append(pid)
            if _state(pid) not in ('', 'Z'):
                found.append(pid)
    return found


def reap(keep=()) -> None:
    """Collect this process's zombie children that no ``Popen`` in ``keep`` waits for."""
    for pid in children(os.getpid()):
        if pid not in keep and _state(pid) == 'Z':
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill(pid: int) -> bool:
    """SIGKILL ``pid``; False when it had already ended and been reaped, between the look
    that found it and now (the caller looks again)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def wait_until(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(step)
    return True


# ----------------------------------------------------------------------------- checkpoints
def flatten(value, prefix: str = ''):
    """(path, leaf) pairs of nested dicts, lists and tuples."""
    if isinstance(value, dict):
        for key in value:
            yield from flatten(value[key], f'{prefix}.{key}')
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from flatten(item, f'{prefix}[{i}]')
    else:
        yield prefix, value


def compared_state(path) -> dict:
    """What must be bit-identical in a final checkpoint: the weights, the optimizer and its
    schedulers, every rank's random states and data position, and the counters."""
    checkpoint = read_checkpoint(str(path))
    meta = checkpoint['meta']
    return dict(flatten(dict(
        state_dict=checkpoint['state_dict'], optimizer=checkpoint['optimizer'],
        param_schedulers=checkpoint['param_schedulers'],
        resume_state=checkpoint['resume_state'],
        meta=dict(epoch=meta['epoch'], iter=meta['iter'], seed=meta['seed']))))


def compare(reference, final) -> dict:
    """Tensors and other values of :func:`compared_state` that differ (a key on one side
    only counts as differing)."""
    a, b = compared_state(reference), compared_state(final)
    tensors = differing_tensors = differing_values = 0
    names = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        is_tensor = isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor)
        if is_tensor:
            tensors += 1
            same = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and \
                x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        else:
            same = key in a and key in b and x == y
        if not same:
            differing_tensors += is_tensor
            differing_values += not is_tensor
            names.append(key)
    return dict(tensors_compared=tensors, values_compared=len(a) - tensors,
                tensors_differing=differing_tensors, values_differing=differing_values,
                differing=names[:20])


def damaged_checkpoints(work: Path) -> list:
    """The ``.pth`` files of ``work`` that do not load (a file removed meanwhile, by
    ``max_keep_ckpts``, is not counted)."""
    damaged = []
    for path in sorted(work.glob('*.pth')):
        try:
            read_checkpoint(str(path))
        except Exception as err:  # noqa: BLE001 - every reason counts
            if path.exists():
                damaged.append(f'{path.name}: {type(err).__name__}: {str(err)[:200]}')
    return damaged


def partial_files(work: Path) -> list:
    return sorted(p.name for p in work.glob('.*.part'))


def iteration_records(work: Path) -> dict:
    """{pid: [iterations]}: rank 0's completed iterations per process (tests/paced_training.py)."""
    runs = {}
    try:
        with open(work / 'executed_iterations.rank0.txt') as f:
            for line in f:
                pid, iteration = line.split()
                runs.setdefault(int(pid), []).append(int(iteration))
    except OSError:
        pass
    return runs


def recorded_iterations(work: Path) -> list:
    return list(iteration_records(work).values())


# ----------------------------------------------------------------------------- the job
class Job:
    """One work dir trained by tools/dist_train.sh, launched again with ``--resume`` after
    a fault that ends it."""

    def __init__(self, config: str, work: Path, log_path: Path, max_restarts: int):
        self.config, self.work, self.log_path = config, work, log_path
        self.max_restarts = max_restarts
        self.shell = self.torchrun = None
        self.launches = 0

    def launch(self) -> None:
        args = ['tools/dist_train.sh', self.config, '2', '--work-dir', str(self.work)]
        if self.launches:
            args.append('--resume')
        env = dict(PORT=str(free_port()), MAX_RESTARTS=str(self.max_restarts),
                   RDZV_ID=f'soak{os.getpid()}_{self.launches}',
                   CVT_MM_TEST_WRITE_PAUSE=str(WRITE_PAUSE))
        with open(self.log_path, 'a') as log:
            log.write(f'\n===== soak: launch {self.launches + 1}: {" ".join(args)}\n')
            log.flush()
            self.shell = start(args, log, env)
        self.torchrun = launcher_pid(self.shell, 'torch.distributed.run')
        self.launches += 1

    def ranks(self) -> dict:
        """{local rank: pid} of the living ranks of the current attempt."""
        found = {}
        for pid in children(self.torchrun):
            rank = local_rank(pid)
            if rank is not None and _state(pid) not in ('', 'Z'):
                found[rank] = pid
        return found

    def ended(self) -> bool:
        return self.shell.poll() is not None

    def log(self) -> str:
        return self.log_path.read_text(errors='replace')


class Soak:
    """The faults of one task's run (see the module's docstring)."""

    def __init__(self, job: Job, kinds: list, delays: list, rng, iterations: int):
        self.job, self.kinds, self.delays, self.rng = job, kinds, delays, rng
        self.iterations = iterations
        self.faults = []  # one dict per fault injected
        self.problems = []  # what failed: the soak's findings
        self.damaged = set()

    def _progress(self) -> int:
        return sum(map(len, recorded_iterations(self.job.work)))

    def _wait_for(self, find, what: str):
        """``find()``'s first truthy value; None when the job ended first or stalled."""
        deadline, progress = time.time() + STALL_TIMEOUT, self._progress()
        while True:
            found = find()
            if found:
                return found
            if self.job.ended():
                return None
            if self._progress() != progress:
                deadline, progress = time.time() + STALL_TIMEOUT, self._progress()
            if time.time() > deadline:
                self.problems.append(f'no progress for {STALL_TIMEOUT} s waiting for {what}')
                return None
            time.sleep(0.002)

    # -------------------------------------------------------------------- the faults
    def _kill_rank(self, fault):
        while True:
            ranks = self._wait_for(self.job.ranks, 'a rank')
            if not ranks:
                return False
            rank = int(self.rng.integers(len(ranks)))
            rank = sorted(ranks)[rank]
            if kill(ranks[rank]):
                fault.update(target=f'rank {rank} (pid {ranks[rank]})')
                return True

    def _kill_worker(self, fault):
        def workers():
            found = [(rank, pid, worker) for rank, pid in sorted(self.job.ranks().items())
                     for worker in children(pid) if alive(worker)]
            return found
        while True:
            found = self._wait_for(workers, 'a data worker')
            if not found:
                return False
            rank, pid, worker = found[int(self.rng.integers(len(found)))]
            if kill(worker):  # a loader's workers end with its epoch or validation
                fault.update(target=f'data worker {worker} of rank {rank} (pid {pid})')
                return True

    def _kill_writer(self, fault):
        draw = self.rng.random()  # drawn whatever happens, for the same draws on a rerun

        def part():
            names = partial_files(self.job.work)
            for name in names:
                writer = int(PART_WRITER.search(name).group(1))
                if alive(writer) and local_rank(writer) is not None:
                    return name, writer
            return None
        found = self._wait_for(part, 'a checkpoint being written')
        if not found:
            return False
        name, writer = found
        time.sleep(draw * WRITE_PAUSE * 0.5)
        os.kill(writer, signal.SIGKILL)
        fault.update(target=f'rank 0 (pid {writer}) writing {name}',
                     landed_in_write=(self.job.work / name).exists(),
                     moment='checkpoint write', iteration=self._iteration())
        return True

    def _end_job(self, fault, how: str):
        self.rng.random()  # one draw per fault
        if how == 'launcher':
            os.kill(self.job.torchrun, signal.SIGKILL)
            fault.update(target=f'torchrun (pid {self.job.torchrun})')
        else:
            os.killpg(self.job.shell.pid, signal.SIGTERM)
            fault.update(target=f'process group {self.job.shell.pid} (bash, torchrun)')
        started = time.time()
        ended = wait_until(lambda: not descendants() and self.job.ended(), END_TIMEOUT)
        reap(keep=[self.job.shell.pid])
        fault.update(end_s=round(time.time() - started, 1), shell_exit=self.job.shell.poll())
        if not ended:
            left = descendants()
            self.problems.append(f'fault {fault["n"]} ({how}): processes left after '
                                 f'{END_TIMEOUT} s: {left}')
            for pid in left:  # ours: started by this soak
                os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not descendants(), 30)
            reap(keep=[self.job.shell.pid])
        return True

    def _iteration(self) -> int:
        """The last iteration rank 0 completed."""
        runs = recorded_iterations(self.job.work)
        return runs[-1][-1] if runs else 0

    def inject(self, n: int, kind: str, delay: float) -> bool:
        fault = dict(n=n, kind=kind, delay_s=round(delay, 2))
        self.since = time.time()
        # Cut short when the run is about to end: every planned fault is injected.
        if wait_until(lambda: self._iteration() >= self.iterations - 2, delay, step=0.05):
            fault['delay_cut_s'] = round(time.time() - self.since, 2)
        if self.job.ended():
            return self._job_ended_early(fault)
        fault['at_s'] = round(time.time() - self.t0, 1)
        fault['iteration'] = self._iteration()
        rank0 = self.job.ranks().get(0)
        fault['moment'] = ('between attempts' if rank0 is None else 'start-up' if rank0 not in
                           iteration_records(self.job.work) else 'training')
        done = {'rank': self._kill_rank, 'worker': self._kill_worker,
                'write': self._kill_writer}.get(kind, lambda f: self._end_job(f, kind))(fault)
        if not done:
            return self._job_ended_early(fault)
        self.faults.append(fault)
        damaged = damaged_checkpoints(self.job.work)
        self.damaged.update(damaged)
        fault['damaged'] = len(damaged)
        print(f'  fault {n} ({kind}) after {fault.get("delay_cut_s", delay):.1f} s, '
              f'{fault["moment"]} (iteration {fault["iteration"]} done): {fault["target"]}'
              + (' in the write' if fault.get('landed_in_write') else '')
              + (f'; damaged: {damaged}' if damaged else ''), flush=True)
        if kind in ('launcher', 'job'):
            self.job.launch()
        return True

    def _job_ended_early(self, fault) -> bool:
        code = self.job.shell.poll()
        self.problems.append(f'before fault {fault["n"]} ({fault["kind"]}) the job exited '
                             f'with {code}' + (' (finished: a longer run is needed)'
                                               if code == 0 else ''))
        return False

    def run(self) -> dict:
        self.t0 = time.time()
        self.job.launch()
        for n, (kind, delay) in enumerate(zip(self.kinds, self.delays), 1):
            if not self.inject(n, kind, delay):
                break
        finished = wait_until(self.job.ended, STALL_TIMEOUT * 3, step=0.2)
        if not finished:
            self.problems.append('the job did not finish after the last fault')
            for pid in descendants():
                os.kill(pid, signal.SIGKILL)
        code = self.job.shell.wait(timeout=60)
        elapsed = time.time() - self.t0
        if code != 0:
            self.problems.append(f'the job exited with {code} after the last fault')
        left = [] if wait_until(lambda: not descendants(), 30) else descendants()
        reap()
        if left:
            self.problems.append(f'processes left at the end: {left}')
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        self.damaged.update(damaged_checkpoints(self.job.work))
        return dict(elapsed_s=round(elapsed, 1), exit_code=code, processes_left=len(left),
                    partial=partial_files(self.job.work))


# ----------------------------------------------------------------------------- a task
def soak_config(root: Path, task: str, data: str, epochs: int) -> str:
    """cluster_runs.exact_config's run (two processes, two persistent workers each, random
    resize and flip, drop path, paced) for ``epochs`` epochs, with a checkpoint every 2
    iterations (mid-epoch), the last 3 kept, and validation every 4 epochs."""
    base = exact_config(root, task, data)
    path = root / f'{task}_soak.py'
    path.write_text(f'''_base_ = {base!r}
train_cfg = dict(max_epochs={epochs}, val_interval=4)
default_hooks = dict(checkpoint=dict(max_keep_ckpts=3))
''')
    return str(path)


def reference_run(config: str, work: Path, log_path: Path, max_restarts: int) -> dict:
    """The uninterrupted run, with the soak's launcher settings; its start-up (to the first
    completed iteration) and iteration time size the soak's delays."""
    job = Job(config, work, log_path, max_restarts)
    started = time.time()
    job.launch()
    wait_until(lambda: recorded_iterations(work) or job.ended(), 900)
    first = time.time() - started
    code = job.shell.wait(timeout=3600)
    elapsed = time.time() - started
    reap()
    if code != 0:
        raise SystemExit(f'the uninterrupted run failed ({code}):\n{job.log()[-3000:]}')
    iterations = sum(map(len, recorded_iterations(work)))
    return dict(elapsed_s=round(elapsed, 1), startup_s=round(first, 1),
                iteration_s=round((elapsed - first) / max(iterations - 1, 1), 2),
                iterations=iterations)


def schedule(faults: int, rng) -> tuple:
    """(kinds, delay fractions): rounds of the five kinds, each round in a seeded order."""
    kinds = []
    while len(kinds) < faults:
        kinds += [KINDS[i] for i in rng.permutation(len(KINDS))]
    return kinds[:faults], list(rng.random(faults))


def soak_task(task: str, faults: int, seed: int, out: Path, data: str) -> dict:
    root = out / task
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, ['det', 'seg'].index(task)])
    # Long enough for the faults to land in every part of it (a fault's delay is cut short
    # when the run is about to end).
    epochs = max(4, math.ceil((3 * faults + 6) / ITERATIONS_PER_EPOCH))
    config = soak_config(root, task, data, epochs)
    max_restarts = faults + 5
    print(f'{task}: uninterrupted run of {epochs * ITERATIONS_PER_EPOCH} iterations', flush=True)
    reference = reference_run(config, root / 'reference', root / 'reference.log', max_restarts)
    window = reference['startup_s'] + 8 * reference['iteration_s']
    kinds, fractions = schedule(faults, rng)
    print(f'{task}: {faults} faults, delays up to {window:.1f} s', flush=True)
    soak = Soak(Job(config, root / 'soak', root / 'soak.log', max_restarts), kinds,
                [f * window for f in fractions], rng, epochs * ITERATIONS_PER_EPOCH)
    end = soak.run()
    log = soak.job.log()
    final = root / 'soak' / f'iter_{epochs * ITERATIONS_PER_EPOCH}.pth'
    reference_final = root / 'reference' / final.name
    comparison = compare(reference_final, final) if final.exists() else dict(
        tensors_compared=0, tensors_differing=-1, values_differing=-1, differing=['no final'])
    executed = sum(map(len, recorded_iterations(root / 'soak')))
    by_kind = {kind: sum(f['kind'] == kind for f in soak.faults) for kind in KINDS}
    return dict(
        task=task, seed=seed, faults_planned=faults, faults=len(soak.faults), by_kind=by_kind,
        in_write=sum(bool(f.get('landed_in_write')) for f in soak.faults),
        torchrun_restarts=log.count('torchrun restart '), relaunches=soak.job.launches - 1,
        iterations=reference['iterations'], iterations_redone=executed - reference['iterations'],
        reference_s=reference['elapsed_s'], soak_s=end['elapsed_s'],
        time_lost_s=round(end['elapsed_s'] - reference['elapsed_s'], 1),
        **{k: comparison[k] for k in ('tensors_compared', 'tensors_differing',
                                      'values_differing', 'differing')},
        damaged=sorted(soak.damaged), partial=end['partial'],
        processes_left=end['processes_left'], problems=soak.problems, fault_log=soak.faults,
        exit_code=end['exit_code'], window_s=round(window, 1))


def passed(result: dict) -> bool:
    return (result['tensors_differing'] == 0 and result['values_differing'] == 0
            and not result['damaged'] and not result['partial']
            and result['processes_left'] == 0 and not result['problems']
            and result['faults'] == result['faults_planned'])


def table(results: list) -> str:
    rows = [('', *[r['task'] for r in results], *(['total'] if len(results) > 1 else []))]

    def row(name, values):
        rows.append((name, *map(str, values),
                     *([str(round(sum(values), 1))] if len(results) > 1 and
                       all(isinstance(v, (int, float)) for v in values) else
                       [''] if len(results) > 1 else [])))
    for kind in KINDS:
        row(f'faults: {DESCRIPTIONS[kind]}', [r['by_kind'][kind] for r in results])
    row('faults in all', [r['faults'] for r in results])
    for moment, label in MOMENTS.items():
        row(f'  landing in {label}', [sum(f['moment'] == moment for f in r['fault_log'])
                                      for r in results])
    row('  kills of a writer with its temporary file in place', [r['in_write']
                                                                 for r in results])
    row('torchrun restarts', [r['torchrun_restarts'] for r in results])
    row('launches with --resume', [r['relaunches'] for r in results])
    row('iterations (uninterrupted)', [r['iterations'] for r in results])
    row('iterations redone', [r['iterations_redone'] for r in results])
    row('uninterrupted run (s)', [r['reference_s'] for r in results])
    row('soak run (s)', [r['soak_s'] for r in results])
    row('time lost (s)', [round(r['time_lost_s'], 1) for r in results])
    row('tensors compared', [r['tensors_compared'] for r in results])
    row('tensors differing', [r['tensors_differing'] for r in results])
    row('other values differing (counters, Python generators)', [r['values_differing']
                                                                  for r in results])
    row('checkpoints damaged or partial', [len(r['damaged']) + len(r['partial'])
                                           for r in results])
    row('processes left', [r['processes_left'] for r in results])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ['| ' + ' | '.join(c.ljust(w) for c, w in zip(r, widths)) + ' |' for r in rows]
    lines.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Faults at random moments in a two-process '
                                     'training run, which must end bit-exact')
    parser.add_argument('--faults', type=int, default=10,
                        help='faults in all (split between the tasks of --task both)')
    parser.add_argument('--seed', type=int, default=0, help='draws the faults, their order, '
                        'delays and targets; a failing soak is rerun with its seed')
    parser.add_argument('--task', choices=['det', 'seg', 'both'], default='both',
                        help='Mask R-CNN (det), UperNet (seg) or both, one after the other')
    parser.add_argument('--out', default='work_dirs/soak', help='data, work dirs and logs')
    parser.add_argument('--json', help='the figure as JSON (default: OUT/soak.json)')
    args = parser.parse_args(argv)
    if args.faults < 1:
        parser.error(f'--faults must be >= 1, not {args.faults}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    become_subreaper()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = str(out / 'data')
    if not osp.isdir(data):
        make_cluster_data(data)
    tasks = ['det', 'seg'] if args.task == 'both' else [args.task]
    shares = [args.faults // len(tasks) + (i < args.faults % len(tasks))
              for i in range(len(tasks))]
    started = time.time()
    results = [soak_task(task, share, args.seed, out, data)
               for task, share in zip(tasks, shares)]
    ok = all(passed(r) for r in results)
    figure = table(results)
    print(f'\nsoak: seed {args.seed}, {args.faults} faults, {time.time() - started:.0f} s in '
          f'all: {"PASSED" if ok else "FAILED"}\n{figure}')
    for result in results:
        for problem in result['problems'] + result['damaged'] + result['partial']:
            print(f'{result["task"]}: {problem}')
        if result['differing']:
            print(f'{result["task"]}: differing: {result["differing"]}')
    path = args.json or str(out / 'soak.json')
    with open(path, 'w') as f:
        json.dump(dict(seed=args.seed, faults=args.faults, passed=ok, results=results,
                       table=figure, seconds=round(time.time() - started, 1)), f, indent=1)
    print(f'figure written to {path}')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
