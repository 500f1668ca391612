"""Put on the PYTHONPATH of a launched training or test process by the distributed tests:
at exit, each rank prints the gloo threads still running (``cvt_mm exit probe: rank R,
gloo threads: [...]``). Threads left for interpreter shutdown sometimes abort the process
(exit -6) after a run that finished; finish_distributed must have ended them.

atexit handlers run once ``main()`` has returned, before the interpreter tears anything
down; forked data workers leave through ``os._exit`` and print nothing."""
import atexit
import os
import sys

PREFIX = 'cvt_mm exit probe'


def gloo_threads() -> list:
    """The names of this process's gloo threads, sorted."""
    names = []
    for task in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{task}/comm') as f:
                names.append(f.read().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return sorted(n for n in names if 'gloo' in n)


def _report() -> None:
    gloo = gloo_threads()
    rank = os.environ.get('RANK', os.environ.get('SLURM_PROCID'))
    sys.stderr.write(f'{PREFIX}: rank {rank}, gloo threads: {gloo}\n')
    sys.stderr.flush()


if 'LOCAL_RANK' in os.environ or 'SLURM_PROCID' in os.environ:  # a rank, not torchrun
    atexit.register(_report)
