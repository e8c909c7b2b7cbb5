"""`.ci/run` gates: a failing test run fails the script, whichever run it is.

Under `set -e`, a failing command that is not the last of an `a && b && c` chain stops the chain
but not the script; the script once exited 0 after `1 failed`. These tests run the real script
with stand-ins for python3, pip, pytest, apt-get and npm on PATH (the script calls only those), so
what is checked is the script's own control flow.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The stand-in python3: `-m venv DIR` makes DIR/bin/{python,pip}; the venv's python fails the
# pytest run named by $FAIL_RUN ("sqlite", "postgres" or "mypy"), and records every call.
_PYTHON3 = """#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3.x (stand-in)"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'PY'
#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$*" in
  *"pytest --backend=postgres"*) [ "$FAIL_RUN" = postgres ] && { echo "1 failed, 9 passed"; exit 1; } ;;
  *"-m pytest"*) [ "$FAIL_RUN" = sqlite ] && { echo "1 failed, 9 passed"; exit 1; } ;;
  *"-m mypy"*) [ "$FAIL_RUN" = mypy ] && exit 1 ;;
esac
exit 0
PY
  printf '#!/usr/bin/env bash\\nexit 0\\n' > "$3/bin/pip"
  chmod +x "$3/bin/python" "$3/bin/pip"
  exit 0
fi
exit 0
"""


def _run_ci(tmp_path: Path, fail_run: str) -> tuple[int, list[str]]:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "python3": _PYTHON3,
        "apt-get": "#!/usr/bin/env bash\nexit 0\n",
        "npm": "#!/usr/bin/env bash\nexit 0\n",
    }
    for name, body in stand_ins.items():
        tool = bin_dir / name
        tool.write_text(body)
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.log"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CALLS": str(calls),
        "FAIL_RUN": fail_run,
    }
    done = subprocess.run(
        ["bash", str(repo / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.skipif(shutil.which("bash") is None or os.name != "posix", reason="needs bash")
def test_ci_passes_when_every_step_passes(tmp_path: Path) -> None:
    code, calls = _run_ci(tmp_path, fail_run="none")
    assert code == 0
    assert any("--backend=postgres" in c for c in calls)
    assert any("-m mypy" in c for c in calls)


@pytest.mark.skipif(shutil.which("bash") is None or os.name != "posix", reason="needs bash")
@pytest.mark.parametrize("fail_run", ["sqlite", "postgres", "mypy"])
def test_a_failing_step_fails_ci_and_the_other_steps_still_run(tmp_path: Path, fail_run: str) -> None:
    code, calls = _run_ci(tmp_path, fail_run=fail_run)
    assert code != 0
    # Nothing is skipped past a failure: the PostgreSQL run and the gates still report.
    assert any("--backend=postgres" in c for c in calls)
    assert any("-m mypy" in c for c in calls)
