"""deploy/monitoring's dashboard and alerts ask only for what Skiff exports.

A metadata service over real HTTP (uvicorn on loopback, tokens on, SQLite) and an agent
talking to it with the agent token, running a maintenance loop with the compactor token
(the compaction role); a producer, a consumer group committing offsets and one maintenance
pass give the families their samples. Both /metrics are scraped and parsed with
prometheus_client's parser. Then, for every expression of every dashboard panel and every
rule:

- every metric it names is a series the two processes export (a counter's `_total`, a
  histogram's `_bucket`, `_sum`, `_count`), or `up` (Prometheus's own, per target);
- every label it matches on is one of that metric's labels (documented in
  `agent.metric_docs`, or seen in a sample), or a label Prometheus adds to every target;
  an exact value (`route="/v1/commit-file"`, `api="produce"`) is one a sample carries;
- every label it groups by, and every `{{label}}` of the panel's legend or `$labels.x` of
  the alert's text, belongs to a metric of the expression, or to the targets.

`promtool check rules` (Debian's prometheus package, installed by scripts/system-deps.sh;
missing, the test fails) checks the rules file, and the dashboard's expressions wrapped as
recording rules, for PromQL syntax.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metric_docs import METRIC_DOCS
from skiff.agent.runtime import start_agent
from skiff.compactor.maintenance_loop import MaintenanceLoop
from skiff.compactor.planner import PlannerConfig
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.fileformat.objectstore import open_async_store, open_store
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenTable
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import HttpMetadataClient
from skiff.metadata.wire.roles import ROLES

from tests.support.agents import free_port
from tests.support.served_app import Served

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
TOKENS = {role: f"{role}-token-{'x' * 24}" for role in sorted(ROLES)}
TIMEOUT_S = 30
# Series Prometheus makes itself, per target.
PROMETHEUS_SERIES = {"up": set[str]()}
# Labels Prometheus (and the operator's PodMonitors) add to every scraped series.
TARGET_LABELS = {"instance", "job", "pod", "namespace", "container", "endpoint"}
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
PROMQL_WORDS |= {"bool", "offset", "inf", "nan"}


# --------------------------------------------------------------------------- what is exported


@dataclass
class Exported:
    """Series names the processes export, and per series its labels and the values seen."""

    labels: dict[str, set[str]] = field(default_factory=dict)
    values: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def add(self, text: str) -> None:
        documented = {name: set(filter(None, d.labels.split(","))) for d in METRIC_DOCS for name in d.names}
        for family in text_string_to_metric_families(text):
            exposed = family.name + "_total" if family.type == "counter" else family.name
            series = {
                "counter": [f"{family.name}_total"],
                "histogram": [f"{family.name}_{s}" for s in ("bucket", "sum", "count")],
                "summary": [f"{family.name}_{s}" for s in ("sum", "count")] + [family.name],
            }.get(family.type, [family.name])
            for name in series:
                self.labels.setdefault(name, set()).update(documented.get(exposed, set()))
                if name.endswith("_bucket"):
                    self.labels[name].add("le")
            for sample in family.samples:
                self.labels.setdefault(sample.name, set()).update(sample.labels)
                for label, value in sample.labels.items():
                    self.values.setdefault((sample.name, label), set()).add(value)


def _scrape(url: str, token: str | None = None) -> str:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.text


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT_S)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT_S)
        self.loop.close()


def _traffic(bootstrap: str, topic: str) -> None:
    """Records produced (acks=all) and read by a group that commits its offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, key=b"k%d" % (i % 4), value=b"v%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "dash",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read = 0
    while read < 10:  # half: the group is left with lag
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    producer.produce(topic, key=b"k9", value=b"late")  # lag the next scrape sees
    assert producer.flush(TIMEOUT_S) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    service = MetadataService.from_url(f"sqlite:///{tmp_path_factory.mktemp('dash') / 'm.db'}")
    tokens = TokenTable.parse("\n".join(f"{r}:{t}" for r, t in TOKENS.items()), "test")
    served = Served(create_app(service, tokens=tokens))
    loop = LoopThread()
    bucket = f"dash-{uuid.uuid4().hex}"

    def client(role: str) -> HttpMetadataClient:
        return HttpMetadataClient(served.url(), credentials=MetadataCredentials(token=TOKENS[role]))

    async def start() -> Any:
        cfg = AgentConfig.from_env({}, agent_id="d1", host="127.0.0.1", port=0, flush_interval_ms=20)
        agent = await start_agent(cfg, client("agent"), open_async_store(f"memory://{bucket}"))
        agent.serve_health("127.0.0.1", metrics_port)
        runner = RunnerConfig(planner=PlannerConfig(holder="agent-d1"), key_prefix="compacted/agent-d1/")
        maintenance = MaintenanceLoop(client("compactor"), open_store(f"memory://{bucket}"), runner)
        agent.background.append(maintenance)  # its families join the agent's /metrics
        admin = client("admin")
        await admin.create_topic("events", 2, {"cleanup.policy": "compact"})
        await admin.close()
        return agent, maintenance

    metrics_port = free_port()
    agent, maintenance = loop.call(start())
    try:
        _traffic(f"127.0.0.1:{agent.port}", "events")
        summary = loop.call(run_pass(maintenance.md, maintenance.store, maintenance.config))
        assert summary.jobs == 1  # the compaction families have samples
        found = Exported()
        found.add(_scrape(f"http://127.0.0.1:{metrics_port}"))
        found.add(_scrape(served.url(), TOKENS["reader"]))
        yield found
    finally:
        loop.call(agent.close())
        loop.call(maintenance.md.close())
        loop.stop()
        served.close()
        service.close()


# --------------------------------------------------------------------------- the expressions


@dataclass(frozen=True)
class Query:
    where: str  # the panel or rule, for messages
    expr: str
    text_labels: frozenset[str]  # labels the legend or the alert's text names


def _dashboard_queries() -> list[Query]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            legend = frozenset(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            out.append(Query(f"panel {panel['title']!r} {target['refId']}", target["expr"], legend))
    return out


def _rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text(encoding="utf-8"))
    assert rule["kind"] == "PrometheusRule"
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _rule_queries() -> list[Query]:
    out = []
    for group in _rule_groups():
        for rule in group["rules"]:
            text = " ".join(rule.get("annotations", {}).values())
            out.append(
                Query(f"rule {rule['alert']}", rule["expr"], frozenset(re.findall(r"\$labels\.(\w+)", text)))
            )
    return out


QUERIES = _dashboard_queries() + _rule_queries()
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*(\"(?:[^\"\\]|\\.)*\")")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions (followed
    by a parenthesis), keywords, label names in braces or grouping lists, or numbers."""
    bare = GROUPING.sub(" ", expr)
    bare = STRING.sub('""', bare)
    bare = re.sub(r"\{[^}]*\}", " ", bare)  # label matchers
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # ranges
    bare = re.sub(r"\b\d+(?:ms|[smhdwy])\b", " ", bare)  # durations (offset 5m)
    bare = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", bare)  # numbers
    names = set()
    for match in NAME.finditer(bare):
        if bare[match.end() :].lstrip().startswith("(") or match.group() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def test_the_parser_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, acks) (rate(skiff_a_bucket{acks!="0", x=~"a|b"}[5m]))) > 1'
        " and on (group) max without (pod) (skiff_b) or vector(0) unless skiff_c offset 5m"
    )
    assert metric_names(expr) == {"skiff_a_bucket", "skiff_b", "skiff_c"}


def test_there_are_panels_and_rules() -> None:
    assert len(_dashboard_queries()) >= 30
    assert {q.where.split()[1] for q in _rule_queries()} >= {
        "SkiffAgentNotReady",
        "SkiffProduceLatencyHigh",
        "SkiffProduceCommitErrors",
        "SkiffConsumerLagGrowing",
        "SkiffCompactionBehind",
        "SkiffGarbageCollectionNotSucceeding",
        "SkiffObjectStoreErrors",
    }


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.where)
def test_every_expression_names_exported_metrics_and_labels(query: Query, exported: Exported) -> None:
    known = {**exported.labels, **PROMETHEUS_SERIES}
    names = metric_names(query.expr)
    assert names, f"{query.where}: no metric in {query.expr}"
    for name in names:
        assert name in known, f"{query.where}: {name} is not exported"
    for name, matchers in SELECTOR.findall(STRING.sub(lambda m: m.group().replace("}", ""), query.expr)):
        for label, op, quoted in MATCHER.findall(matchers):
            assert label in known[name] | TARGET_LABELS, f"{query.where}: {name} has no label {label}"
            seen = exported.values.get((name, label))
            if op == "=" and seen is not None:  # an exact value must be one the system uses
                assert json.loads(quoted) in seen, (
                    f"{query.where}: {name}{{{label}}} is one of {sorted(seen)}"
                )
    available = set().union(*(known[n] for n in names)) | TARGET_LABELS
    grouped = {label.strip() for labels in GROUPING.findall(query.expr) for label in labels.split(",")} - {""}
    assert grouped <= available, f"{query.where}: no metric of it has {grouped - available}"
    assert query.text_labels <= available, f"{query.where}: its text names {query.text_labels - available}"


# --------------------------------------------------------------------------- promtool


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed to check deploy/monitoring (bash scripts/system-deps.sh installs it)"
    return promtool


def _check_rules(path: Path) -> None:
    out = subprocess.run(
        [_promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "skiff.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": _rule_groups()}), encoding="utf-8")
    _check_rules(rules)


def test_promtool_accepts_the_dashboard_expressions(tmp_path: Path) -> None:
    """Each panel's expression as a recording rule (Grafana's `$__rate_interval` as 5m)."""
    rules = [
        {"record": f"skiff_dashboard:query_{i}", "expr": q.expr.replace("$__rate_interval", "5m")}
        for i, q in enumerate(_dashboard_queries())
    ]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    _check_rules(path)
