"""SASL login cost: PLAIN against SCRAM-SHA-256 and SCRAM-SHA-512.

    python bench/sasl_login.py [--iterations 4096,8192,16384] [--logins 200]
                               [--e2e-iterations 8192] [--e2e-logins 100] [--concurrency 1,4]
                               [--skip-e2e]

(a) Server CPU per login, in this process (no network): for each PBKDF2 iteration count
and mechanism, one `agent.sasl.SaslState` per login is driven through the whole exchange
(SaslHandshake's `start`, then one `authenticate` per token) over a `CredentialCache` that
already holds the user's credentials. The client's half (scramp's `ScramClient`, which
derives SaltedPassword with PBKDF2 for SCRAM) runs outside the timed region. Timed with
`time.process_time` (CPU of every thread of the process: PLAIN's PBKDF2 runs in a worker
thread through `asyncio.to_thread`), so the figure is CPU, not wall time on a loaded
machine. The client's CPU per login is reported beside it: SCRAM moves the PBKDF2 to the
client (the server keeps StoredKey/ServerKey and computes two HMACs and a hash), PLAIN makes
the server derive it (`metadata.security.scram_types.password_matches`). Also the pure function
`password_matches` alone, per mechanism of the stored credential.

(b) End to end: `skiff playground` as a subprocess (SQLite metadata, file bucket) with a
PLAINTEXT and a SASL_PLAINTEXT listener; one user made by `skiff users create` with
`--e2e-iterations`. A real client, aiokafka's `create_conn` (TCP connect, ApiVersions,
SaslHandshake, SaslAuthenticate until done), logs in `--e2e-logins` times per mechanism
and concurrency level (`--concurrency`: logins in flight at once from one asyncio loop),
each connection closed after its login. Reported: logins/s (wall), connect+auth latency
p50/p99, and CPU per login of the agent process (utime+stime from /proc/<pid>/stat, 10 ms
ticks over the whole batch) and of this client process. "none" is the PLAINTEXT listener:
connect + ApiVersions only, the floor every login pays.

The ratio SCRAM/PLAIN is of numbers from the same run. The client shares the machine's
two cores with the agent (and, on the project machine, with other work: the load average
is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka.conn import create_conn  # noqa: E402
from scramp import ScramClient  # noqa: E402
from skiff.agent.network.sasl import PLAIN, CredentialCache, SaslState  # noqa: E402
from skiff.metadata.security.scram_types import (  # noqa: E402
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    make_credential,
    password_matches,
)
from skiff.metadata.wire.operations import MetadataClient  # noqa: E402

from bench.support import pct  # noqa: E402
from tests.support.agents import free_port, skiff_command, wait_for_port  # noqa: E402

USER = "bench"
PASSWORD = "bench-secret-password"
MECHS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


class StaticMetadata:
    """The one metadata call a CredentialCache makes, answered from memory."""

    def __init__(self, creds: list[ScramCredential]) -> None:
        self.creds = creds

    async def scram_credentials(self, user: str) -> list[ScramCredential]:
        return [c for c in self.creds if c.user == user]


async def server_login(cache: CredentialCache, mech: str) -> tuple[float, float]:
    """One full login; (server CPU s, client CPU s)."""
    server_cpu = client_cpu = 0.0
    state = SaslState(enabled=MECHS, credentials=cache)
    t = time.process_time()
    assert state.start(mech)
    if mech == PLAIN:
        _, principal = await state.authenticate(f"\0{USER}\0{PASSWORD}".encode())
        server_cpu += time.process_time() - t
        assert principal == f"User:{USER}"
        return server_cpu, client_cpu
    server_cpu += time.process_time() - t
    t = time.process_time()
    client = ScramClient([mech], USER, PASSWORD)
    first = client.get_client_first().encode()
    client_cpu += time.process_time() - t
    t = time.process_time()
    server_first, _ = await state.authenticate(first)
    server_cpu += time.process_time() - t
    t = time.process_time()
    client.set_server_first(server_first.decode())
    final = client.get_client_final().encode()
    client_cpu += time.process_time() - t
    t = time.process_time()
    server_final, principal = await state.authenticate(final)
    server_cpu += time.process_time() - t
    assert principal == f"User:{USER}"
    client.set_server_final(server_final.decode())  # checks the server's signature
    return server_cpu, client_cpu


async def part_a(iterations: list[int], logins: int) -> None:
    print(f"\n(a) server CPU per login, in process, {logins} logins each; load average {loadavg()}")
    print(f"{'iterations':>10} {'mechanism':<14} {'server CPU ms p50':>17} {'mean':>7} {'client CPU ms':>13}")
    for n in iterations:
        creds = [make_credential(USER, m, PASSWORD, iterations=n) for m in (SCRAM_SHA_256, SCRAM_SHA_512)]
        cache = CredentialCache(
            cast(MetadataClient, StaticMetadata(creds)), ttl_ms=3_600_000, monotonic=time.monotonic
        )
        means: dict[str, float] = {}
        for mech in MECHS:
            for _ in range(3):  # warm: the cache, to_thread's worker, scramp's imports
                await server_login(cache, mech)
            runs = [await server_login(cache, mech) for _ in range(logins)]
            server = [s * 1000 for s, _ in runs]
            client = statistics.fmean(c * 1000 for _, c in runs)
            means[mech] = statistics.fmean(server)
            print(f"{n:>10} {mech:<14} {pct(server, 0.5):>17.3f} {means[mech]:>7.3f} {client:>13.3f}")
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            print(f"{'':>10} server CPU {mech}/PLAIN = {means[mech] / means[PLAIN]:.4f}")
        for cred in creds:
            t = time.process_time()
            for _ in range(logins):
                assert password_matches(cred, PASSWORD)
            per_ms = (time.process_time() - t) * 1000 / logins
            print(f"{'':>10} password_matches against a {cred.mechanism} credential: {per_ms:.3f} ms CPU")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


async def one_login(port: int, mech: str | None) -> float:
    t = time.perf_counter()
    if mech is None:
        conn = await create_conn("127.0.0.1", port)
    else:
        conn = await create_conn(
            "127.0.0.1",
            port,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mech,
            sasl_plain_username=USER,
            sasl_plain_password=PASSWORD,
        )
    elapsed = time.perf_counter() - t
    conn.close()
    return elapsed


async def e2e_batch(port: int, mech: str | None, logins: int, concurrency: int) -> list[float]:
    todo = iter(range(logins))
    latencies: list[float] = []

    async def worker() -> None:
        for _ in todo:
            latencies.append(await one_login(port, mech))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def part_b(iterations: int, logins: int, levels: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain_port, sasl_port, md_port = free_port(), free_port(), free_port()
        env = {
            **os.environ,
            "SKIFF_LOG_LEVEL": "WARNING",
            "SKIFF_LISTENERS": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        }
        args = ["playground", "--data-dir", str(root / "data"), "--port", str(plain_port)]
        args += ["--metadata-port", str(md_port), "--compaction-interval-ms", "0"]
        log = root / "playground.log"
        proc = subprocess.Popen(
            [*skiff_command(), *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env
        )
        try:
            wait_for_port(plain_port, proc, log)
            wait_for_port(sasl_port, proc, log)
            made = subprocess.run(
                [*skiff_command(), "users", "create", USER, "--metadata", f"http://127.0.0.1:{md_port}"]
                + ["--password", PASSWORD, "--iterations", str(iterations)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert made.returncode == 0, made.stderr
            print(
                f"\n(b) end to end, aiokafka create_conn against `skiff playground` (SASL_PLAINTEXT), "
                f"{iterations} iterations, {logins} logins per row; load average {loadavg()}"
            )
            print(
                f"{'mechanism':<14} {'in flight':>9} {'logins/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
                f"{'agent CPU ms/login':>18} {'client CPU ms/login':>19}"
            )
            for level in levels:
                rates: dict[str, float] = {}
                agent_cpu: dict[str, float] = {}
                for mech in (None, *MECHS):
                    port = plain_port if mech is None else sasl_port
                    asyncio.run(e2e_batch(port, mech, 5, 1))  # warm (credential cache, imports)
                    a0, c0, t0 = proc_cpu_s(proc.pid), time.process_time(), time.perf_counter()
                    lat = asyncio.run(e2e_batch(port, mech, logins, level))
                    wall = time.perf_counter() - t0
                    a1, c1 = proc_cpu_s(proc.pid), time.process_time()
                    name = mech or "none"
                    rates[name] = logins / wall
                    agent_cpu[name] = (a1 - a0) * 1000 / logins
                    ms = [x * 1000 for x in lat]
                    print(
                        f"{name:<14} {level:>9} {rates[name]:>9.1f} {pct(ms, 0.5):>8.2f} {pct(ms, 0.99):>8.2f} "
                        f"{agent_cpu[name]:>18.2f} {(c1 - c0) * 1000 / logins:>19.2f}"
                    )
                for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
                    print(
                        f"{'':<14} {level:>9} {mech}/PLAIN: logins/s {rates[mech] / rates[PLAIN]:.2f}, "
                        f"agent CPU {agent_cpu[mech] / max(agent_cpu[PLAIN], 1e-9):.2f}"
                    )
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=ints, default=[4096, 8192, 16384])
    ap.add_argument("--logins", type=int, default=200)
    ap.add_argument("--e2e-iterations", type=int, default=8192)
    ap.add_argument("--e2e-logins", type=int, default=100)
    ap.add_argument("--concurrency", type=ints, default=[1, 4])
    ap.add_argument("--skip-e2e", action="store_true")
    args = ap.parse_args()
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # "Sending username and password in the clear"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {loadavg()}")
    asyncio.run(part_a(args.iterations, args.logins))
    if not args.skip_e2e:
        part_b(args.e2e_iterations, args.e2e_logins, args.concurrency)


if __name__ == "__main__":
    main()
