#!/usr/bin/env bash
# Create (or reuse) the virtual environment of one tested stack (docs/installation.md):
#
#   tools/misc/setup_env.sh                  # STACK=pinned: .venv, requirements.txt
#   STACK=prebuilt tools/misc/setup_env.sh   # .venv-prebuilt: torch 2.1.2, mmcv 2.1.0, numpy 1
#   STACK=fork tools/misc/setup_env.sh       # .venv-fork: Python 3.12, OneDL forks, torch 2.14.1
#   CVT_MM_VENV=/path tools/misc/setup_env.sh
#
# The stack's requirements are checked first (tools/misc/check_stack.py): a combination that
# cannot work stops here, before the long mmcv build, naming what is allowed.
# Re-running is instant: a stamp records the hash of the files that define the environment,
# and nothing is reinstalled while it matches. Editing the stack's requirements, pyproject.toml
# or this script triggers an incremental `pip install` (pip's wheel cache keeps the mmcv build).
#
# GPU boxes: mmcv's CUDA ops are compiled when `nvcc` is on PATH (or CUDA_HOME is set) and a GPU
# is visible (`nvidia-smi`), or when FORCE_CUDA=1. TORCH_CUDA_ARCH_LIST defaults to the visible
# GPUs' compute capability. See docs/installation.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

STACK=${STACK:-pinned}
stack_vars=$(python3 tools/misc/check_stack.py "$STACK" --shell) || exit 2
eval "$stack_vars"  # VENV, PYTHON_VERSION, REQUIREMENTS, EXTRAS, IMPORTS
VENV=${CVT_MM_VENV:-$VENV}
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python$PYTHON_VERSION
    if ! "$PYTHON" --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
        # pyenv keeps other versions off PATH unless selected (its shim is there, and fails):
        # take its newest of this minor.
        found=$(ls -d "$(pyenv root)"/versions/"$PYTHON_VERSION".*/bin/python"$PYTHON_VERSION" 2>/dev/null \
            | sort -V | tail -n1 || true)
        PYTHON=${found:-$PYTHON}
    fi
fi
python_found=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "$PYTHON_VERSION")
if [[ "$python_found" != "$PYTHON_VERSION" ]]; then
    # Another interpreter than the stack's (PYTHON=...): its rules again, for that Python.
    python3 tools/misc/check_stack.py "$STACK" --python "$python_found" >/dev/null || exit 2
fi
stamp="$VENV/.cvt_mm_env_stamp"
want=$(cat "$REQUIREMENTS" pyproject.toml tools/misc/setup_env.sh tools/misc/stacks.py \
    cvt_mm/apis/stacks.py | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi

started=$SECONDS
step() {  # step NAME: say what runs now, and how long the previous step took
    local now=$SECONDS
    [[ -n "${step_name:-}" ]] && echo "setup_env[$STACK]: ${step_name} took $((now - step_start)) s"
    step_name=$1
    step_start=$now
    echo "setup_env[$STACK]: ${step_name}"
}

if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" --version >/dev/null 2>&1 || { echo "setup_env: '$PYTHON' not found; stack '$STACK' needs Python $PYTHON_VERSION (or set PYTHON=)" >&2; exit 1; }
    step "creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
pin() { grep -E "^$1[=<>!~ ]" "$REQUIREMENTS" | head -n1 | tr -d ' '; }
version_of() { pin "$1" | sed -E 's/^[a-z0-9-]+[=<>!~]+//'; }

# 1. torch/torchvision first: mmcv compiles against the installed torch. A build of the pinned
#    version for another CUDA (e.g. 2.13.0+cu126 from PyTorch's index, installed beforehand) is
#    kept; one beside which torchvision does not load (2.13.0+cpu) is replaced. torch < 2.3
#    was compiled against NumPy 1: the stack's numpy pin goes in with it.
if ! "$VENV/bin/python" - "$(version_of torch)" "$(version_of torchvision)" 2>/dev/null <<'PY'
import sys, torch, torchvision
assert torch.__version__.split('+')[0] == sys.argv[1], torch.__version__
assert torchvision.__version__.split('+')[0] == sys.argv[2], torchvision.__version__
PY
then
    step "[1/3] installing $(pin torch) and $(pin torchvision) (about a minute)"
    "${pip[@]}" install -q "$(pin torch)" "$(pin torchvision)" $(pin numpy)
fi

# 2. mmcv (upstream or OneDL's) with its ops, compiled from its source archive against this
#    torch; CUDA kernels where a CUDA toolkit and GPU exist.
mmcv=$(grep -E '^(onedl-)?mmcv[=<>!~ ]' "$REQUIREMENTS" | head -n1 | tr -d ' ')
if ! "$VENV/bin/python" -c "import mmcv, mmcv.ops" 2>/dev/null; then
    if [[ -z "${FORCE_CUDA:-}" ]] && command -v nvidia-smi >/dev/null 2>&1 \
        && { command -v nvcc >/dev/null 2>&1 || [[ -n "${CUDA_HOME:-}" ]]; }; then
        export FORCE_CUDA=1
    fi
    if [[ "${FORCE_CUDA:-0}" == "1" ]]; then
        export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
        # torch's CUDA wheels ship headers (cusparse.h, ...) some system toolkits lack.
        nv_inc=$("$VENV/bin/python" -c "import glob,site;print(':'.join(glob.glob(site.getsitepackages()[0]+'/nvidia/*/include')))")
        export CPATH="${nv_inc}${CPATH:+:$CPATH}"
        if [[ -z "${TORCH_CUDA_ARCH_LIST:-}" ]] && command -v nvidia-smi >/dev/null 2>&1; then
            TORCH_CUDA_ARCH_LIST=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sort -u | paste -sd ';')
            export TORCH_CUDA_ARCH_LIST
        fi
        step "[2/3] building $mmcv with CUDA ops (CUDA_HOME=$CUDA_HOME, arch=${TORCH_CUDA_ARCH_LIST:-default}; about 20 minutes on 2 cores, seconds when pip has it cached)"
    else
        step "[2/3] building $mmcv with CPU ops from source (about 8-20 minutes on 2 cores)"
    fi
    # Python's default CFLAGS carry -g: debug info made the build 1175 s and _ext.so 83 MB on
    # 2 cores; without it (and with -O2 -DNDEBUG, which setting CFLAGS must restate) 817 s and
    # 1.9 MB. Setting CFLAGS replaces Python's flags, so the user's own go after ours.
    export CFLAGS="-DNDEBUG -O2 -g0 -fwrapv${CFLAGS:+ $CFLAGS}"
    venv_abs=$(cd "$VENV" && pwd)
    build_tools="$venv_abs/.mmcv-build-tools"
    wheels="$venv_abs/.mmcv-wheel"
    src="$venv_abs/.mmcv-src"
    rm -rf "$wheels" "$src"
    mkdir -p "$src"
    # Upstream mmcv's setup.py imports pkg_resources, which setuptools >= 70 lacks (torch
    # declares >= 77); OneDL's declares setuptools >= 80 (its PEP 639 licence field). The
    # build's setuptools (with wheel and ninja, which torch's extension builder needs on PATH
    # to compile in parallel) goes into a folder of its own, seen only by the build through
    # PYTHONPATH: the venv keeps its own. Absolute paths: pip runs setup.py from elsewhere.
    case $mmcv in
        onedl-*) tools_setuptools="setuptools>=80" ;;
        *) tools_setuptools="setuptools<70" ;;
    esac
    # pip compares a --target install with the venv's packages and would print a resolver
    # ERROR about a folder the venv never imports.
    "${pip[@]}" install -q --no-warn-conflicts --upgrade --target "$build_tools" \
        "$tools_setuptools" "packaging>=24.2" wheel ninja
    with_tools=(env PATH="$build_tools/bin:$venv_abs/bin:$PATH" PYTHONPATH="$build_tools")
    "${with_tools[@]}" "${pip[@]}" download -q --no-deps --no-binary :all: \
        --no-build-isolation -d "$src" "$mmcv"
    tar -xzf "$src"/*.tar.gz -C "$src"
    srcdir=$(ls -d "$src"/*/ | head -n1)
    # torch >= 2.14's headers stop with "#error C++20 or later compatible compiler is required
    # to use ATen"; mmcv's setup.py passes -std=c++17 (a later flag wins, so CFLAGS cannot
    # override it): the copy built here asks for C++20 where torch's headers demand it.
    torch_include=$("$VENV/bin/python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
    if grep -rqs "C++20 or later compatible compiler is required" "$torch_include/c10" "$torch_include/ATen"; then
        echo "setup_env[$STACK]: this torch's headers need C++20: building $mmcv with -std=c++20"
        sed -i "s/-std=c++17/-std=c++20/g" "$srcdir/setup.py"
    fi
    # Every unit of mmcv's ops first includes torch's headers through the same two files:
    # the compiler wrapper precompiles them once per build (tools/misc/pch-c++: each unit 2.6-3.5x
    # faster, the objects byte-identical; docs/installation.md).
    pch_cxx=(CXX="$(pwd)/tools/misc/pch-c++" CVT_MM_REAL_CXX="${CXX:-c++}"
             CVT_MM_PCH_DIR="$src/pch")
    "${with_tools[@]}" "${pch_cxx[@]}" MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
        "${pip[@]}" wheel -q --no-build-isolation --no-deps -w "$wheels" "$srcdir"
    "${pip[@]}" install -q $(pin numpy) $(pin opencv-python) "$wheels"/*.whl
    rm -rf "$src"
fi

# 3. Everything else, then this package in editable mode with the stack's extras: their
#    runtime parts are met by the pins by then, so pip adds only the tests/deploy tools.
# torch/torchvision are left out here: step 1 settled them, and `===` would not accept a
# local build such as 2.13.0+cu126.
step "[3/3] installing the rest of $REQUIREMENTS and cvt_mm[$EXTRAS] (editable)"
"${pip[@]}" install -q -r <(grep -vE '^(torch|torchvision)[=<>!~ ]' "$REQUIREMENTS")
"${pip[@]}" install -q --no-deps -e .
"${pip[@]}" install -q -e ".[$EXTRAS]"
"$VENV/bin/python" -c "import ${IMPORTS}" \
    || { echo "setup_env: the environment in $VENV does not import; see the errors above" >&2; exit 1; }
step done
echo "$want" > "$stamp"
echo "setup_env[$STACK]: ready ($VENV) in $((SECONDS - started)) s"
