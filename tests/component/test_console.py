"""The web console's routes over real HTTP (the metadata app under uvicorn on loopback).

With authentication on: a browser without a token is sent to the login page (other clients
get the service's 401); the login stores the token in an HttpOnly, SameSite=Strict cookie
and refuses unknown tokens; a reader views every page, with the numbers the service holds
(records, high watermarks, lag, the records themselves read from the bucket) and no admin
form; a reader cannot act (403); an admin acts only with the form's CSRF token and only
after the confirmation step (a dry run for an offset reset). With authentication off (the
playground) there is no login, but CSRF is still enforced.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.server.console import queries
from skiff.metadata.server.console.session import csrf_token
from skiff.metadata.server.lag_sampler import LagSampler
from skiff.metadata.service import MetadataService
from skiff.metadata.types import (
    COMPACTION_REQUEST_TASK,
    AgentInfo,
    BatchSpec,
    ChunkSpec,
    FileSpec,
    GroupOffset,
    StoreUsage,
    Topic,
)
from skiff.metadata.usage import LAG_SAMPLE_INTERVAL_MS

from tests.support.metadata_fixtures import T0_MS, FakeClock
from tests.support.served_app import Served

READER_TOKEN = "reader-token-" + "r" * 24
ADMIN_TOKEN = "admin-token-" + "a" * 24
AGENT_TOKEN = "agent-token-" + "g" * 24
TOKENS = f"reader:{READER_TOKEN}\nadmin:{ADMIN_TOKEN}\nagent=agent-1:{AGENT_TOKEN}"
HTML = {"accept": "text/html,application/xhtml+xml"}
RECORDS = 5


@dataclass
class Env:
    service: MetadataService
    served: Served
    topic: Topic

    @property
    def url(self) -> str:
        return self.served.url()


def produce(svc: MetadataService, bucket_url: str, topic: Topic, partition: int, values: list[bytes]) -> None:
    """One file with one batch of `values` (keys k0, k1, ...), PUT and committed as an agent would."""
    records = [
        Record(i, 1_700_000_000_000 + i, f"k{i}".encode(), v, (("h", b"x"),)) for i, v in enumerate(values)
    ]
    batch = build_batch(records)
    data, (placement,) = build_segment([ChunkInput(topic.topic_id, partition, [batch], 1, len(values))])
    key = f"segments/console-{uuid.uuid4().hex}.seg"
    store = open_store(bucket_url)
    store.put(key, data)
    store.close()
    spec = BatchSpec(
        placement.batch_positions[0], len(batch), len(values), len(values), records[-1].timestamp
    )
    (result,) = svc.commit_file(
        FileSpec(key, len(data), writer="agent-1"), [ChunkSpec(topic.topic_id, partition, (spec,))]
    )
    assert result.error_code == 0 and result.batches[0].error_code == 0, result


def _env(tmp_path: Path, db_url: str, tokens: TokenTable | None) -> Iterator[Env]:
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    svc = MetadataService.from_url(db_url, bucket_url=bucket)
    topic = svc.create_topic("demo", 2, {"retention.ms": "86400000"})
    values = [json.dumps({"n": i}).encode() for i in range(RECORDS)]
    produce(svc, bucket, topic, 0, values)
    svc.commit_offsets("g1", [GroupOffset("demo", 0, 2)])
    svc.heartbeat_agent(AgentInfo("agent-1", "127.0.0.1", 9092, zone="zone-a", version="9.8.7"))
    served = Served(create_app(svc, tokens=tokens))
    try:
        yield Env(svc, served, topic)
    finally:
        served.close()
        svc.close()


@pytest.fixture
def env(tmp_path: Path, db_url: str) -> Iterator[Env]:
    """Authentication on; once on SQLite, once on PostgreSQL (tests/support/pg.py)."""
    yield from _env(tmp_path, db_url, TokenTable.parse(TOKENS, "test"))


@pytest.fixture
def open_env(tmp_path: Path) -> Iterator[Env]:
    yield from _env(tmp_path, f"sqlite:///{tmp_path}/m.db", None)


@contextmanager
def signed_in(env: Env, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=env.url, headers=HTML) as http:
        r = http.post("/console/login", data={"token": token, "next": "/console/topics"})
        assert r.status_code == 303 and r.headers["location"] == "/console/topics", r.text
        yield http


def csrf_of(page: str) -> str:
    m = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page)
    assert m is not None, "the page has no form with a CSRF token"
    return m.group(1)


def cell(page: str, css_class: str, row_attr: str) -> str:
    """The text of the `<td class="... css_class">` in the row marked `row_attr`."""
    row = re.search(rf"<tr {row_attr}>(.*?)</tr>", page, re.S)
    assert row is not None, row_attr
    m = re.search(rf'<td class="num {css_class}">([^<]*)</td>', row.group(1))
    assert m is not None, (row_attr, css_class)
    return m.group(1).strip()


# ------------------------------------------------------------------ authentication


def test_a_browser_without_a_token_gets_the_login_page(env: Env) -> None:
    with httpx.Client(base_url=env.url) as http:
        r = http.get("/console/topics?offset=0", headers=HTML)
        assert r.status_code == 303
        assert r.headers["location"] == "/console/login?next=%2Fconsole%2Ftopics%3Foffset%3D0"
        login = http.get(r.headers["location"], headers=HTML)
        assert login.status_code == 200 and 'name="token"' in login.text
        api = http.get("/console/topics")  # not a browser: the service's bare 401
        assert api.status_code == 401 and api.json()["error_code"] == 58


def test_login_sets_a_strict_http_only_cookie_and_refuses_unknown_tokens(env: Env) -> None:
    with httpx.Client(base_url=env.url, headers=HTML) as http:
        bad = http.post("/console/login", data={"token": "not-a-token-" + "x" * 20, "next": "/console"})
        assert bad.status_code == 200 and "Unknown token." in bad.text and "set-cookie" not in bad.headers
        agent_only = http.post("/console/login", data={"token": AGENT_TOKEN})
        assert "no reader or admin role" in agent_only.text and "set-cookie" not in agent_only.headers
        ok = http.post("/console/login", data={"token": READER_TOKEN, "next": "//evil.example/x"})
        assert ok.status_code == 303 and ok.headers["location"] == "/console"  # no open redirect
        cookie = ok.headers["set-cookie"]
        for part in ("skiff_console_token=", "HttpOnly", "SameSite=Strict", "Path=/console"):
            assert part in cookie
        assert "Secure" not in cookie and READER_TOKEN not in cookie  # plain HTTP; encoded
        assert http.get("/console").status_code == 200
        out = http.get("/console/logout")
        assert "Max-Age=0" in out.headers["set-cookie"]
        assert http.get("/console").status_code == 303


def test_a_cookie_with_an_unknown_token_is_cleared_on_the_way_to_the_login(env: Env) -> None:
    with httpx.Client(
        base_url=env.url, headers=HTML, cookies={"skiff_console_token": "bm9wZS1ub3BlLW5vcGUtbm9wZQ"}
    ) as http:
        r = http.get("/console")
        assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
        assert "Max-Age=0" in r.headers["set-cookie"]


# ------------------------------------------------------------------ a reader views


def test_reader_sees_every_page_with_the_services_numbers(env: Env) -> None:
    env.service.report_reader_usage(StoreUsage(gets=7200))  # a Spark job's GETs in the last hour
    env.service.report_agent_usage("agent-1", StoreUsage(puts=360))
    with signed_in(env, READER_TOKEN) as http:
        overview = http.get("/console").text
        assert "agent-1" in overview and "zone-a" in overview and "127.0.0.1:9092" in overview
        assert "<td>9.8.7</td>" in overview  # the version the agent reported in its heartbeat
        assert cell(overview, "gets", 'data-role="reader"') == "2.00"  # per second over the hour
        assert cell(overview, "puts", 'data-role="agent"') == "0.10"
        assert cell(overview, "usd", 'data-role="reader"') == "$0.00288"  # 7,200 GETs at $0.0004 / 1,000
        assert 'id="gets-chart"' in overview and "GET/s</title></rect>" in overview
        assert '<svg class="chart"' in overview and 'http-equiv="refresh"' not in overview
        assert '<meta http-equiv="refresh" content="10">' in http.get("/console?refresh=10").text
        topics = http.get("/console/topics").text
        assert cell(topics, "partitions", 'data-topic="demo"') == "2"
        assert cell(topics, "records", 'data-topic="demo"') == str(RECORDS)
        assert cell(topics, "put-usd", 'data-topic="demo"') == "$0.000005"  # its one file's PUT, all of it
        assert 'id="create-topic"' not in topics  # no admin form for a reader
        topic = http.get("/console/topics/demo").text
        assert cell(topic, "hw", 'data-partition="0"') == str(RECORDS)
        assert cell(topic, "log-start", 'data-partition="0"') == "0"
        assert "retention.ms" in topic and "segments/console-" in topic and "delete-topic" not in topic
        group = http.get("/console/group", params={"id": "g1"}).text
        assert cell(group, "lag", 'data-tp="demo-0"') == str(RECORDS - 2)
        assert cell(group, "committed", 'data-tp="demo-0"') == "2"
        groups = http.get("/console/groups").text
        assert cell(groups, "lag", 'data-group="g1"') == str(RECORDS - 2)
        compaction = http.get("/console/compaction")
        assert compaction.status_code == 200 and 'id="gc"' in compaction.text
        assert http.get("/console/topics/nope").status_code == 404


def test_message_browser_reads_the_records_from_the_bucket(env: Env) -> None:
    with signed_in(env, READER_TOKEN) as http:
        last = http.get(
            "/console/topics/demo/messages", params={"partition": 0, "mode": "last", "limit": 2}
        ).text
        assert re.findall(r'<td class="num offset">(\d+)</td>', last) == ["3", "4"]
        assert "{&#34;n&#34;: 4}" in last  # the value as text, escaped
        at = http.get(
            "/console/topics/demo/messages",
            params={"partition": 0, "mode": "offset", "at": 1, "limit": 2, "format": "hex"},
        ).text
        assert re.findall(r'<td class="num offset">(\d+)</td>', at) == ["1", "2"]
        assert b'{"n": 1}'.hex()[:8] in at
        by_time = http.get(
            "/console/topics/demo/messages",
            params={"partition": 0, "mode": "timestamp", "at": "1700000000003", "format": "json"},
        ).text
        assert re.findall(r'<td class="num offset">(\d+)</td>', by_time) == ["3", "4"]
        assert "&#34;n&#34;: 3" in by_time  # pretty-printed JSON
        bad = http.get("/console/topics/demo/messages", params={"mode": "timestamp", "at": "yesterday"})
        assert "cannot read from" in bad.text


def test_reader_cannot_act(env: Env) -> None:
    with signed_in(env, READER_TOKEN) as http:
        token = csrf_of_any(http)
        r = http.post(
            "/console/actions/create-topic",
            data={"csrf_token": token, "name": "nope", "partitions": "1", "confirm": "yes"},
        )
        assert r.status_code == 403
    assert env.service.describe_topics(["nope"]) == {}


def csrf_of_any(http: httpx.Client) -> str:
    """A reader's pages carry no form: its CSRF token as the console computes it."""
    return csrf_token(SimpleNamespace(headers={"authorization": f"Bearer {READER_TOKEN}"}, scope={}))  # type: ignore[arg-type]


# ------------------------------------------------------------------ an admin acts


def test_admin_actions_need_the_csrf_token_and_a_confirmation(env: Env) -> None:
    with signed_in(env, ADMIN_TOKEN) as http:
        page = http.get("/console/topics").text
        token = csrf_of(page)
        fields = {"name": "created", "partitions": "4", "configs": "cleanup.policy=compact"}
        assert (
            http.post("/console/actions/create-topic", data={**fields, "confirm": "yes"}).status_code == 400
        )
        wrong = http.post(
            "/console/actions/create-topic", data={**fields, "confirm": "yes", "csrf_token": "0" * 64}
        )
        assert wrong.status_code == 400 and "CSRF" in wrong.text
        review = http.post("/console/actions/create-topic", data={**fields, "csrf_token": token})
        assert review.status_code == 200 and 'id="confirm-form"' in review.text
        assert env.service.describe_topics(["created"]) == {}  # the review changes nothing
        done = http.post(
            "/console/actions/create-topic", data={**fields, "csrf_token": token, "confirm": "yes"}
        )
        assert done.status_code == 200 and "Created topic created" in done.text
        created = env.service.describe_topics(["created"])["created"]
        assert created.partition_count == 4 and created.configs["cleanup.policy"] == "compact"
        again = http.post("/console/actions/create-topic", data={**fields, "csrf_token": token})
        assert again.status_code == 400 and "already exists" in again.text


def test_admin_alters_configs_and_deletes_a_topic(env: Env) -> None:
    with signed_in(env, ADMIN_TOKEN) as http:
        token = csrf_of(http.get("/console/topics/demo").text)
        form = {"csrf_token": token, "name": "demo", "set": "retention.ms=1000", "delete": ""}
        review = http.post("/console/actions/alter-configs", data=form).text
        assert "86400000" in review and "1000" in review
        http.post("/console/actions/alter-configs", data={**form, "confirm": "yes"})
        assert env.service.describe_topics(["demo"])["demo"].configs["retention.ms"] == "1000"
        bad = http.post("/console/actions/alter-configs", data={**form, "set": "no.such.config=1"})
        assert bad.status_code == 400 and "no.such.config" in bad.text
        review = http.post("/console/actions/delete-topic", data={"csrf_token": token, "name": "demo"})
        assert "cannot be undone" in review.text and f"{RECORDS:,} records" in review.text
        assert env.service.describe_topics(["demo"])
        http.post(
            "/console/actions/delete-topic", data={"csrf_token": token, "name": "demo", "confirm": "yes"}
        )
        assert env.service.describe_topics(["demo"]) == {}


def test_admin_requests_a_compaction_pass(env: Env) -> None:
    with signed_in(env, ADMIN_TOKEN) as http:
        page = http.get("/console/compaction").text
        form = {"csrf_token": csrf_of(page), "back": "/console/compaction"}
        review = http.post("/console/actions/run-compaction", data=form).text
        assert "Run a pass now" in review and COMPACTION_REQUEST_TASK not in env.service.last_successes()
        done = http.post("/console/actions/run-compaction", data={**form, "confirm": "yes"})
        assert done.status_code == 200 and "Requested" in done.text
        assert COMPACTION_REQUEST_TASK in env.service.last_successes()
    with signed_in(env, READER_TOKEN) as http:
        assert 'id="run-compaction"' not in http.get("/console/compaction").text


def test_reset_offsets_shows_the_dry_run_first(env: Env) -> None:
    with signed_in(env, ADMIN_TOKEN) as http:
        token = csrf_of(http.get("/console/group", params={"id": "g1"}).text)
        form = {"csrf_token": token, "group": "g1", "topic": "demo", "to": "latest", "at": ""}
        dry = http.post("/console/actions/reset-offsets", data=form).text
        rows = re.findall(r"<tr><td>demo</td><td>(\d+)</td><td>([-\d]+)</td><td>(\d+)</td></tr>", dry)
        assert rows == [("0", "2", str(RECORDS)), ("1", "-", "0")]
        assert _committed(env) == {0: 2}  # the dry run changed nothing
        http.post("/console/actions/reset-offsets", data={**form, "confirm": "yes"})
        assert _committed(env) == {0: RECORDS, 1: 0}
        http.post(
            "/console/actions/reset-offsets", data={**form, "to": "offset", "at": "1", "confirm": "yes"}
        )
        assert _committed(env) == {0: 1, 1: 0}  # clamped into each partition's log


def _committed(env: Env) -> dict[int, int]:
    return {o.partition: o.offset for o in env.service.fetch_offsets("g1", ["demo"])}


# ------------------------------------------------------------------ authentication off


def test_without_authentication_there_is_no_login_but_csrf_holds(open_env: Env) -> None:
    with httpx.Client(base_url=open_env.url, headers=HTML) as http:
        page = http.get("/console/topics")
        assert page.status_code == 200 and "skiff_console_session=" in page.headers["set-cookie"]
        assert http.get("/console/login").status_code == 303
        fields = {"name": "open", "partitions": "1", "confirm": "yes"}
        assert http.post("/console/actions/create-topic", data=fields).status_code == 400
        ok = http.post("/console/actions/create-topic", data={**fields, "csrf_token": csrf_of(page.text)})
        assert ok.status_code == 200
    assert open_env.service.describe_topics(["open"])
    with httpx.Client(base_url=open_env.url, headers=HTML) as other:  # another browser's session
        r = other.post(
            "/console/actions/create-topic",
            data={**fields, "name": "other", "csrf_token": csrf_of(page.text)},
        )
        assert r.status_code == 400


# ------------------------------------------------------------------ the console's queries


def test_committed_files_series_counts_files_per_minute_by_level(
    metadata_service: MetadataService, clock: FakeClock, tmp_path: Path
) -> None:
    """On both databases: files land in the minute of their commit, agents' and the compactor's apart."""
    (tmp_path / "bucket").mkdir()
    bucket = f"file://{tmp_path / 'bucket'}"
    topic = metadata_service.create_topic("series", 1, {})
    for minute in (0, 0, 2):
        clock.now = T0_MS + minute * 60_000 + 1_000
        produce(metadata_service, bucket, topic, 0, [b"a", b"b"])
    clock.now = T0_MS + 5 * 60_000
    series = queries.committed_files_series(metadata_service.engine, clock.now, 5 * 60_000, 60_000)
    assert [b.start_ms for b in series] == [T0_MS + i * 60_000 for i in range(5)]
    assert [b.level0_files for b in series] == [2, 0, 1, 0, 0]
    assert all(b.level0_bytes > 0 for b in series if b.level0_files) and not any(
        b.compacted_files for b in series
    )
    totals = queries.file_totals(metadata_service.engine)
    assert totals.live_files == 3 and totals.deleting == (0, 0)
    sizes = queries.topic_sizes(metadata_service.engine)[topic.topic_id]
    assert (
        sizes.chunks == 3
        and sizes.bytes == queries.partition_sizes(metadata_service.engine, topic.topic_id)[0].bytes
    )
    files, total = queries.topic_files(metadata_service.engine, topic.topic_id, limit=2, offset=0)
    assert total == 3 and len(files) == 2 and files[0].committed_ms >= files[1].committed_ms
    assert queries.compaction_rows(metadata_service.engine, limit=10) == []
    assert queries.gc_queue(metadata_service.engine, limit=10) == []


def test_group_page_charts_the_lag_samples_metadata_keeps(tmp_path: Path) -> None:
    """Lag history: one sample per interval of the service's clock, kept in the database (so
    any replica draws the same chart), taken by the served app's sampler and before a page
    is drawn; the group's chart shows each (the lag moves from 3 to 1 when the group commits
    further), and a second sampler in the same interval adds nothing."""
    clock = FakeClock(T0_MS)
    bucket = f"file://{tmp_path / 'bucket'}"
    (tmp_path / "bucket").mkdir()
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db", bucket_url=bucket, clock=clock)
    topic = svc.create_topic("demo", 1, {})
    produce(svc, bucket, topic, 0, [b"a", b"b", b"c", b"d", b"e"])
    svc.commit_offsets("g1", [GroupOffset("demo", 0, 2)])
    served = Served(create_app(svc))
    first_at = T0_MS - T0_MS % LAG_SAMPLE_INTERVAL_MS
    try:
        with httpx.Client(base_url=served.url(), headers=HTML) as http:
            first = http.get("/console/group", params={"id": "g1"}).text
            assert _lag_bars(first) == ["3 records"]
            svc.commit_offsets("g1", [GroupOffset("demo", 0, 4)])
            http.get("/console/group", params={"id": "g1"})  # within the interval: no new sample
            assert svc.usage.lag_series("g1", 0) == [(first_at, 3)]
            clock.advance(LAG_SAMPLE_INTERVAL_MS)
            page = http.get("/console/group", params={"id": "g1"}).text
        assert svc.usage.lag_series("g1", 0) == [(first_at, 3), (first_at + LAG_SAMPLE_INTERVAL_MS, 1)]
        assert _lag_bars(page) == ["3 records", "1 records"]
        assert not LagSampler(svc).sample_if_due()  # another replica, same interval: nothing new
    finally:
        served.close()
        svc.close()


def _lag_bars(page: str) -> list[str]:
    chart = re.search(r'<figure id="lag-chart">(.*?)</figure>', page, re.S)
    assert chart is not None, "the group page has no lag chart"
    return [
        m.split(": ", 1)[1]
        for m in re.findall(r'<rect class="bar"[^>]*><title>([^<]*)</title>', chart.group(1))
    ]
