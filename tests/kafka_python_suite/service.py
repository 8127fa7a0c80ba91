"""Stand-in for kafka-python's `test/service.py`, which its PyPI sdist leaves out.

kafka-python's integration fixtures (`test/integration/fixtures.py`) import `ExternalService`
and `SpawnedService` from `test.service`. `run.py` copies this file there. With `KAFKA_URI`
set, the fixtures only ever build `ExternalService(host, port)`: the broker under test is
already running (Skiff's agent, or any Kafka-compatible broker) and nothing is spawned.
`SpawnedService` (used to launch a real Kafka or ZooKeeper from `KAFKA_ROOT`) refuses to run,
so a test that would need a broker of its own fails loudly instead of hanging on a missing
distribution.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

__all__ = ["ExternalService", "SpawnedService"]

log = logging.getLogger(__name__)


class ExternalService:
    """A broker that is already running at host:port (what `KAFKA_URI` names)."""

    def __init__(self, host: str, port: int) -> None:
        log.info("Using already running service at %s:%d", host, port)
        self.host = host
        self.port = port
        self.captured_stdout: list[str] = []
        self.captured_stderr: list[str] = []

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def wait_for(self, pattern: str, timeout: float = 30) -> bool:
        return True

    def dump_logs(self) -> None:
        sys.stderr.write(f"(external service at {self.host}:{self.port}: no logs captured here)\n")


class SpawnedService:
    """Refuses to spawn: this suite only runs against an external broker (set KAFKA_URI)."""

    def __init__(self, args: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.args = list(args or [])
        self.env = env
        self.captured_stdout: list[str] = []
        self.captured_stderr: list[str] = []

    def _refuse(self) -> None:
        raise RuntimeError(
            "the Skiff kafka-python suite runs against an external broker only (KAFKA_URI); "
            f"this test tried to spawn a server: {' '.join(self.args)}"
        )

    def start(self) -> None:
        self._refuse()

    def run(self) -> None:
        self._refuse()

    def wait_for(self, pattern: str, timeout: float = 30) -> bool:
        return False

    def dump_logs(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        pass
