"""The README's quick start runs as written against a playground (issue 25, item 3).

The Python block (`### Produce and consume with Python`) is taken from README.md, pointed
at the test's playground instead of localhost:9092, and run with this interpreter (the
playground's `./.venv` is where `scripts/playground.sh` installs confluent-kafka); it must
print the ten records it produced. `scripts/playground.sh` must name kcat when it is missing,
since the quick start's kcat section relies on it being installed separately."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python_block() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Produce and consume with Python", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the README's Python quick start has no sh block"
    return block.group(1)


def test_readme_python_quick_start_round_trips(playground: str) -> None:
    script = _python_block().replace("localhost:9092", playground).replace(".venv/bin/python", sys.executable)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    values = re.findall(r"b'(v\d+)'", done.stdout)
    assert sorted(values) == sorted(f"v{i}" for i in range(10)), done.stdout


def test_playground_script_points_to_kcat_when_missing() -> None:
    script = (REPO / "scripts" / "playground.sh").read_text()
    assert "command -v kcat" in script
    assert "apt-get install kcat" in script
