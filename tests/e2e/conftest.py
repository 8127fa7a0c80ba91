"""End-to-end tier settings.

Warnings are errors in the whole suite (pyproject.toml), with one exception here: the Kafka
clients these tests drive (aiokafka, kafka-python) leave sockets to agents the tests kill or
stop unclosed, and the garbage collector reports them later, often during another test
("Exception ignored in: <socket.socket ...>" as a PytestUnraisableExceptionWarning). They are
the clients' sockets, not ours: the unit, contract and component tiers, where our own
sockets are the only ones, keep this an error.
"""

from __future__ import annotations

import pytest

_CLIENT_SOCKETS = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(_CLIENT_SOCKETS)
