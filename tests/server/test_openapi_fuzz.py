"""schemathesis against a real ``tether serve``: examples, coverage, fuzzing and stateful
phases of its OpenAPI schema, with 0 failures (every status answered is documented, every
body matches its schema, nothing valid is refused and nothing invalid accepted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.conftest import tether_cli

CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.timeout(600)
def test_the_openapi_schema_survives_schemathesis(server: tuple[str, str, Path]) -> None:
    url, _, db = server
    made = tether_cli("keys", "create", "--tenant", "fuzz", "--scope", "admin", "--db", str(db),
                      cwd=db.parent)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is in the [test] extra: pip install -e '.[test]'"
    done = subprocess.run(
        [
            cli,
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            "-H",
            f"Authorization: Bearer {token}",
            "--max-examples",
            "40",
            "--seed",
            "20261127",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in done.stdout, done.stdout[-3000:]
