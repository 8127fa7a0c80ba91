"""The `--log-format json` formatter (cli.JsonLogFormatter) and the logging set-up that
keeps the HTTP client's per-request lines off."""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys

from skiff.cli import JsonLogFormatter, _setup_logging


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("skiff.agent.x", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_one_json_object_per_line_with_time_level_logger_and_message() -> None:
    record = _record("PUT %s failed:\n%d tries", "k\u00e9y", 3)
    record.created = 1_700_000_000.123
    line = JsonLogFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2023-11-14T22:13:20.123Z",
        "level": "WARNING",
        "logger": "skiff.agent.x",
        "message": "PUT k\u00e9y failed:\n3 tries",
    }


def test_the_exception_text_is_a_field() -> None:
    entry = json.loads(JsonLogFormatter().format(_record("failed", exc=True)))
    assert entry["message"] == "failed"
    assert entry["exc_info"].startswith("Traceback")
    assert entry["exc_info"].endswith("ValueError: boom")


def test_http_client_loggers_stay_at_warning() -> None:
    from uvicorn.config import LOGGING_CONFIG

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    uvicorn_loggers = copy.deepcopy(LOGGING_CONFIG["loggers"])
    root.handlers.clear()
    try:
        args = argparse.Namespace(log_level="INFO", log_format="json", command="agent")
        _setup_logging(args, debug=False)
        assert isinstance(root.handlers[0].formatter, JsonLogFormatter)
        for name in ("httpx", "httpcore"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO)
        assert logging.getLogger("skiff.agent").isEnabledFor(logging.INFO)
        assert all(c["propagate"] and not c["handlers"] for c in LOGGING_CONFIG["loggers"].values())
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        LOGGING_CONFIG["loggers"] = uvicorn_loggers
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.NOTSET)
