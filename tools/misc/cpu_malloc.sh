#!/usr/bin/env bash
# glibc's malloc made to keep and reuse large freed blocks: the launchers source this file
# (tools/dist_train.sh, dist_test.sh, slurm_train.sh, slurm_sbatch.sh, misc/run_demo.sh), and
#   bash tools/misc/cpu_malloc.sh CMD [ARGS...]     runs CMD with it.
# By default glibc serves each large block (a stage's activation map) with a fresh mmap and
# unmaps it when freed, so the next tensor of that size page-faults every page again; on a CPU
# that took several times the arithmetic of an element-wise operator (docs/benchmarks.md,
# "CPU allocator"). MALLOC_MMAP_MAX_=0 keeps large blocks in the heap and
# MALLOC_TRIM_THRESHOLD_ (SIZE_MAX) keeps the heap from being trimmed. Only the start of a
# process reads them. No effect on CUDA memory.
# Left alone where the allocator is the user's choice: CVT_MM_MALLOC=system, any MALLOC_*
# variable or glibc.malloc tunable already set, or another allocator in LD_PRELOAD.
case "${CVT_MM_MALLOC:-reuse}" in
    reuse)
        if [ -z "${MALLOC_MMAP_MAX_+x}${MALLOC_MMAP_THRESHOLD_+x}${MALLOC_TRIM_THRESHOLD_+x}" ] \
                && [[ "${GLIBC_TUNABLES:-}" != *glibc.malloc* ]] \
                && [[ "${LD_PRELOAD:-}" != *malloc* ]]; then
            export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=18446744073709551615
        fi ;;
    system) ;;
    *)
        echo "CVT_MM_MALLOC=${CVT_MM_MALLOC}: allowed values are 'system', 'reuse'" >&2
        if [ "${BASH_SOURCE[0]}" = "$0" ]; then exit 2; else return 2; fi ;;
esac
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ $# -gt 0 ]; then exec "$@"; fi
