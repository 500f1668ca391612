"""torch.distributed's environment from slurm's (``--launcher slurm``), without ``scontrol``."""
import os
import re

__all__ = ['first_slurm_host', 'slurm_environment']


def first_slurm_host(nodelist: str) -> str:
    """The first host name of a slurm node list (``SLURM_NODELIST``), expanded as
    ``scontrol show hostnames`` does, without needing ``scontrol``.

    Example::

        >>> first_slurm_host('gpu-a[07-09,12],gpu-b3')
        'gpu-a07'
    """
    first, depth = '', 0
    for char in nodelist.strip():
        if char == ',' and depth == 0:
            break
        depth += (char == '[') - (char == ']')
        first += char
    if not first or depth:
        raise ValueError(f'cannot read the slurm node list {nodelist!r}; expected names such '
                         "as 'node1', 'node[01-04]' or 'rack[1-2]-gpu[1,3]'")
    # Each bracket holds ranges; the first host takes the start of each first range.
    return re.sub(r'\[([^\]]*)\]', lambda m: m.group(1).split(',')[0].split('-')[0], first)


def slurm_environment(environ=None) -> dict:
    """The ``torch.distributed`` environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT) of a task started by ``srun``, from what slurm gives it (SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST, SLURM_JOB_ID). MASTER_ADDR and MASTER_PORT
    already set are kept; by default the master is the node list's first host and the port
    is 20000 + the job id modulo 10000, so two jobs that share a node do not collide.

    Raises:
        ValueError: naming the slurm variables that are missing.
    """
    env = os.environ if environ is None else environ
    missing = [k for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST') if k not in env]
    if missing:
        raise ValueError(f'--launcher slurm: {", ".join(missing)} not set; start the job '
                         'with srun (tools/slurm_train.sh), or use --launcher pytorch '
                         '(tools/dist_train.sh)')
    job = env.get('SLURM_JOB_ID', '')
    return dict(
        RANK=env['SLURM_PROCID'], WORLD_SIZE=env['SLURM_NTASKS'],
        LOCAL_RANK=env.get('SLURM_LOCALID', '0'),
        MASTER_ADDR=env.get('MASTER_ADDR') or first_slurm_host(env['SLURM_NODELIST']),
        MASTER_PORT=env.get('MASTER_PORT') or str(20000 + int(job) % 10000 if job.isdigit()
                                                  else 29500))
