"""The bounded case of the soak (tests/soak.py, issue 59): five faults, one of each kind, at
random moments of a two-process UperNet run under tools/dist_train.sh with MAX_RESTARTS (the
deterministic kills of tests/test_engine/test_cluster_training.py train Mask R-CNN);
the run must end with the uninterrupted run's weights, optimizer state, schedulers, random
states and data position, no checkpoint damaged or partial, and no process left. The long
run (`make soak FAULTS=50`) and its figure: docs/cluster.md, "Faults at random moments"."""
import json
import subprocess
import sys

import pytest

from helpers import ROOT


def test_a_soak_without_faults_is_refused(capsys):
    import soak  # tests/, on the path as helpers is
    with pytest.raises(SystemExit):
        soak.parse_args(['--faults', '0'])
    assert '--faults must be >= 1, not 0' in capsys.readouterr().err


@pytest.mark.slow
def test_faults_of_every_kind_at_random_moments_end_bit_exact(tmp_path):
    out = tmp_path / 'soak'
    proc = subprocess.run([sys.executable, 'tests/soak.py', '--faults', '5', '--seed', '1',
                           '--task', 'seg', '--out', str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    said = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (out / 'soak.json').is_file(), f'exit code {proc.returncode}, no figure:\n{said}'
    figure = json.loads((out / 'soak.json').read_text())
    result = figure['results'][0]
    assert proc.returncode == 0 and figure['passed'], said
    assert all(result['by_kind'][kind] == 1 for kind in
               ('rank', 'worker', 'write', 'launcher', 'job')), result['by_kind']
    assert result['tensors_differing'] == 0 and result['values_differing'] == 0
    assert result['tensors_compared'] > 600  # weights, optimizer state, random states
    assert result['damaged'] == [] and result['partial'] == []
    assert result['processes_left'] == 0
    for path in out.rglob('*.pth'):  # pytest keeps the last three runs' folders
        path.unlink()
