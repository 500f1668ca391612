#!/usr/bin/env bash
# A real one-node slurm cluster on this machine, for the tests: Debian's slurmctld + slurmd
# (slurm-wlm) authenticated by munge, configured in a folder of its own.
#
#   bash tests/slurm/local_slurm.sh start   # install (apt, once), configure, start; prints
#                                           # the line `export SLURM_CONF=...` to use it
#   bash tests/slurm/local_slurm.sh stop    # stop the daemons this script started
#   bash tests/slurm/local_slurm.sh status
#
# Needs root (the daemons, the munge key, apt-get). The cluster has one node (this host, all
# its CPUs) and two partitions for preemption tests: `batch` (default; its jobs are requeued
# when preempted, after a grace time in which they get SIGTERM) and `urgent` (higher
# priority tier, preempts `batch`). CVT_MM_SLURM_DIR (default /tmp/cvt_mm_slurm) holds the
# configuration, spool, state and logs; the system's /etc/slurm is left alone.
set -euo pipefail
DIR=${CVT_MM_SLURM_DIR:-/tmp/cvt_mm_slurm}
CONF=$DIR/slurm.conf
GRACE=${CVT_MM_SLURM_GRACE:-60}

say() { echo "local_slurm: $*" >&2; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    [[ $(id -u) == 0 ]] || { say "root is needed to install slurm-wlm and munge"; exit 3; }
    command -v apt-get >/dev/null || { say "apt-get is needed to install slurm-wlm and munge"; exit 3; }
    say "installing slurm-wlm and munge (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
        return  # a munged is serving already
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- munged
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    say "munged did not start"; exit 1
}

write_conf() {
    local host cpus hardware
    host=$(hostname -s)
    # The node as slurmd sees the hardware (CPUs, sockets, cores, threads), not `nproc`: that
    # obeys OMP_NUM_THREADS, which the test workers set to their share of the CPUs, and a node
    # configured with fewer CPUs than its jobs ask for leaves them pending for ever.
    hardware=$(slurmd -C | head -n 1 | grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
    cpus=$(grep -oE 'CPUs=[0-9]+' <<< "$hardware" | cut -d= -f2)
    [[ -n $cpus ]] || { say "slurmd -C did not report the node's CPUs"; exit 1; }
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    # No cgroup.conf: 22.05 has no CgroupPlugin=disabled, and linuxproc + task/none need none.
    # One "gpu" generic resource per CPU: tools/slurm_train.sh asks for --gres=gpu:N as
    # MMDetection's does, and slurm schedules them as it would real GPUs.
    # Slurm counts a gpu resource by its device files: empty files stand in for them.
    local i
    for ((i = 0; i < cpus; i++)); do : > "$DIR/gpu$i"; done
    echo "NodeName=$host Name=gpu File=$DIR/gpu[0-$((cpus - 1))]" > "$DIR/gres.conf"
    cat > "$CONF" <<EOF
ClusterName=cvtmm
SlurmctldHost=$host
SlurmctldPort=${CVT_MM_SLURMCTLD_PORT:-6817}
SlurmdPort=${CVT_MM_SLURMD_PORT:-6818}
AuthType=auth/munge
# A job credential lives 10 s instead of 120: a requeued job is held that long (plus 1 s)
# before it may start again on the node that revoked its old credential.
AuthInfo=cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobRequeue=1
ReturnToService=2
# SIGTERM to SIGKILL after a cancel or a time limit: 120 s (slurm's default 30), so that a test
# iteration paced to outlast the time limit, and its checkpoint, fit (test_slurm.py ENDINGS).
KillWait=120
MinJobAge=300
InactiveLimit=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$host ${hardware}Gres=gpu:$cpus State=UNKNOWN
PartitionName=batch Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE OverSubscribe=NO
PartitionName=batch_cancel Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=$GRACE OverSubscribe=NO
PartitionName=urgent Nodes=$host MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
EOF
}

running() {  # running NAME: the daemon of that pid file is alive
    local pid_file=$DIR/$1.pid
    [[ -s $pid_file ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

start() {
    install
    start_munge
    # Always a fresh cluster: daemons left by an earlier run (a killed test session) would
    # carry its configuration and jobs.
    stop_daemons
    write_conf
    # -c: a clean start (no jobs or node states of an earlier cluster in $DIR). The
    # daemons find gres.conf beside the slurm.conf that SLURM_CONF names.
    SLURM_CONF=$CONF slurmctld -c
    SLURM_CONF=$CONF slurmd
    local host
    host=$(hostname -s)
    for _ in $(seq 150); do
        if SLURM_CONF=$CONF sinfo -h -n "$host" -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            echo "export SLURM_CONF=$CONF"
            return
        fi
        sleep 0.2
    done
    say "the node did not come up; see $DIR/log/"
    SLURM_CONF=$CONF sinfo -N -l >&2 || true
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    exit 1
}

stop_daemons() {
    local name pid
    for name in slurmd slurmctld; do
        if running "$name"; then
            pid=$(cat "$DIR/$name.pid")
            kill "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$DIR/$name.pid"
    done
}

case ${1:-} in
    start) start ;;
    stop) stop_daemons ;;
    status) running slurmctld && running slurmd && SLURM_CONF=$CONF sinfo ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
