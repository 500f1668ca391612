#!/usr/bin/env bash
# timm's own model tests (tests/test_models.py) on this package's timm models, as timm's CI runs
# them (GITHUB_ACTIONS set: no pretrained downloads, CI's model exclusions):
#
#   bash .dev_scripts/run_timm_suite.sh TIMM_CHECKOUT_OR_GITDIR [pytest args]
#
# TIMM_CHECKOUT_OR_GITDIR is a clone of huggingface/pytorch-image-models (a work tree or a bare
# git directory); TIMM_REF (default HEAD) picks the commit whose tests run. Nothing of timm's
# is kept here: its test file is read from that repository at run time into a temporary folder,
# where three edits make it see our models: `import cvt_mm` first (which registers them),
# our modules `cvt` and `cmt` in FEAT_INTER_FILTERS (forward_intermediates and features_only
# through it, as the timm modules listed there) and `cvt_*` in NON_STD_FILTERS (a cls-token
# family whose forward_features gives tokens, as timm's ViTs). Only our models are selected
# (-k 'cvt_ or cmt_'); the installed timm (the .venv's) runs them. Without pytest-timeout,
# timm's timeout marks are unknown marks, which do nothing.
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,6p' "$0" >&2
    exit 2
fi
TIMM_REPO=$1
shift
REF=${TIMM_REF:-HEAD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/timm_suite.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/tests"
git -C "$TIMM_REPO" show "$REF:tests/test_models.py" > "$TMP/tests/test_models.py"
git -C "$TIMM_REPO" show "$REF:pyproject.toml" > "$TMP/timm_pyproject.toml"

"$PY" - "$TMP" <<'EOF'
import re
import sys
import tomllib

tmp = sys.argv[1]
path = f'{tmp}/tests/test_models.py'
text = open(path).read()
edits = [(r'FEAT_INTER_FILTERS = \[', "FEAT_INTER_FILTERS = ['cvt', 'cmt', "),
         (r'NON_STD_FILTERS = \[', "NON_STD_FILTERS = ['cvt_*', ")]
for pattern, replacement in edits:
    text, count = re.subn(pattern, replacement, text, count=1)
    if count != 1:
        sys.exit(f'run_timm_suite.sh: {pattern!r} not found in timm\'s tests/test_models.py')
open(path, 'w').write('import cvt_mm  # noqa: F401  (registers the CvT and CMT models)\n' + text)
# timm's markers, registered as its pyproject.toml registers them (no unknown-mark warnings).
markers = tomllib.load(open(f'{tmp}/timm_pyproject.toml', 'rb'))['tool']['pytest'][
    'ini_options'].get('markers', [])
with open(f'{tmp}/pytest.ini', 'w') as ini:
    ini.write('[pytest]\nmarkers =\n' + ''.join(f'    {m}\n' for m in markers))
EOF

cd "$ROOT"
export GITHUB_ACTIONS=1
exec "$PY" -m pytest "$TMP/tests/test_models.py" -c "$TMP/pytest.ini" --rootdir "$TMP" \
    -p no:cacheprovider -W ignore::pytest.PytestUnknownMarkWarning -k 'cvt_ or cmt_' "$@"
