"""The web console in a real browser: Debian's chromium, headless, driven by Selenium
through Debian's chromedriver (/usr/bin/chromium, /usr/bin/chromedriver; nothing is
downloaded; scripts/system-deps.sh installs both).

A `skiff playground` process with authentication on (a reader and an admin token) gets
records from confluent-kafka and a consumer group that reads part of them and commits.
The browser then signs in as the reader and loads every page, and the numbers on them are
checked against what a Kafka client sees of the same cluster: the partition count, each
partition's high watermark (`get_watermark_offsets`), the group's committed offsets and
lag, and the records themselves in the message browser. Signed in as the admin, it creates
a topic through the form and its confirmation step, and the Kafka admin client must list
it. A screenshot of each page is saved under the test's temporary directory, and also
into the directory `SKIFF_CONSOLE_SCREENSHOTS` names (the docs' images:
`SKIFF_CONSOLE_SCREENSHOTS=docs/images bash scripts/test.sh tests/e2e/test_console_browser.py`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.test_clients_roundtrip import create_topic
from tests.support.agents import SkiffProcess
from tests.support.s3servers import free_port

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
READER = "reader-console-" + "r" * 24
ADMIN = "admin-console-" + "a" * 24
TOPIC = "orders"
PARTITIONS = 3
RECORDS = 60
CONSUMED = 25
GROUP = "console-readers"


@dataclass
class Stack:
    bootstrap: str
    console: str  # http://127.0.0.1:PORT/console


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A playground with tokens, RECORDS records in TOPIC and GROUP's offsets committed."""
    from tests.support.agents import _spawn

    data = tmp_path_factory.mktemp("console")
    port, mport = free_port(), free_port()
    env = {"SKIFF_METADATA_TOKENS": f"reader:{READER} admin:{ADMIN}", "SKIFF_DEFAULT_PARTITIONS": "3"}
    args = ["playground", "--host", "127.0.0.1", "--data-dir", str(data / "data"), "--port", str(port)]
    proc: SkiffProcess = _spawn([*args, "--metadata-port", str(mport)], port, data / "playground.log", env)
    try:
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, TOPIC, PARTITIONS)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(RECORDS):
            producer.produce(TOPIC, key=f"key-{i}", value=f'{{"order": {i}}}')
            if i % 20 == 19:  # a few files, not one
                assert producer.flush(30) == 0
        _consume_and_commit(bootstrap, CONSUMED)
        yield Stack(bootstrap, f"http://127.0.0.1:{mport}/console")
    finally:
        proc.kill(15)


def _consume_and_commit(bootstrap: str, n: int) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([TOPIC])
    got = 0
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
            c.commit(message=m, asynchronous=False)
    c.close()  # leaves the group: Empty, so offsets may be reset
    assert got == n


def watermarks(bootstrap: str) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "console-check"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in range(PARTITIONS)}
    finally:
        c.close()


def committed(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        parts = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        c.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), (
            f"{path} is missing: run scripts/system-deps.sh (chromium, chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1360,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    # A click that submits a form returns before the next page is there: lookups wait for it.
    driver.implicitly_wait(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shoot(browser: WebDriver, tmp_path: Path) -> Callable[[str], None]:
    """Save a screenshot of the page as console-NAME.png (and into SKIFF_CONSOLE_SCREENSHOTS)."""
    extra = os.environ.get("SKIFF_CONSOLE_SCREENSHOTS")

    def shoot(name: str) -> None:
        # The whole page, not the window: the viewport is stretched to the page's height.
        height = min(int(browser.execute_script("return document.documentElement.scrollHeight")), 3000)
        metrics = {"width": 1360, "height": height, "deviceScaleFactor": 1, "mobile": False}
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            for where in [tmp_path, *([Path(extra)] if extra else [])]:
                where.mkdir(parents=True, exist_ok=True)
                assert browser.save_screenshot(str(where / f"console-{name}.png"))
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    return shoot


def texts(browser: WebDriver, css: str) -> list[str]:
    return [e.text.strip() for e in browser.find_elements(By.CSS_SELECTOR, css)]


def absent(browser: WebDriver, element_id: str) -> bool:
    """No element with this id on the loaded page (asked without the implicit wait)."""
    browser.implicitly_wait(0)
    try:
        return not browser.find_elements(By.ID, element_id)
    finally:
        browser.implicitly_wait(30)


def sign_in(browser: WebDriver, stack: Stack, token: str) -> None:
    browser.get(f"{stack.console}/logout")
    browser.get(stack.console)
    assert "/console/login" in browser.current_url  # a browser without a token: the login page
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "sign-in").click()
    WebDriverWait(browser, 30).until(lambda d: "/console/login" not in d.current_url)
    assert browser.current_url.rstrip("/").endswith("/console"), browser.current_url


def test_reader_pages_show_the_clusters_numbers(
    stack: Stack, browser: WebDriver, shoot: Callable[[str], None]
) -> None:
    browser.get(f"{stack.console}/logout")
    browser.get(f"{stack.console}/topics")
    assert "/console/login" in browser.current_url
    shoot("login")
    sign_in(browser, stack, READER)
    assert texts(browser, "#agent-count") == ["1"]
    assert texts(browser, "#agents td.ok") == ["ready"]
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")  # the charts are drawn
    shoot("overview")

    marks = watermarks(stack.bootstrap)
    assert sum(hi - lo for lo, hi in marks.values()) == RECORDS
    browser.get(f"{stack.console}/topics")
    assert texts(browser, f'tr[data-topic="{TOPIC}"] td.partitions') == [str(PARTITIONS)]
    assert texts(browser, f'tr[data-topic="{TOPIC}"] td.records') == [str(RECORDS)]
    assert absent(browser, "create-topic")  # a reader gets no admin form
    shoot("topics")

    browser.get(f"{stack.console}/topics/{TOPIC}")
    assert texts(browser, "#partitions td.hw") == [str(marks[p][1]) for p in range(PARTITIONS)]
    assert texts(browser, "#partitions td.log-start") == [str(marks[p][0]) for p in range(PARTITIONS)]
    assert browser.find_elements(By.CSS_SELECTOR, "#files tbody td code")  # the files holding it
    shoot("topic")

    busiest = max(range(PARTITIONS), key=lambda p: marks[p][1])
    browser.get(f"{stack.console}/topics/{TOPIC}/messages?partition={busiest}&mode=last&limit=5&format=json")
    hw = marks[busiest][1]
    assert texts(browser, "#records td.offset") == [str(o) for o in range(max(hw - 5, 0), hw)]
    assert texts(browser, "#browse-hw") == [str(hw)]
    assert all('"order":' in v for v in texts(browser, "#records td:nth-child(4) pre"))
    shoot("messages")


def test_group_lag_matches_the_committed_offsets(
    stack: Stack, browser: WebDriver, shoot: Callable[[str], None]
) -> None:
    sign_in(browser, stack, READER)
    marks, offsets = watermarks(stack.bootstrap), committed(stack.bootstrap)
    # Lag as kafka-consumer-groups.sh gives it: over the partitions with a committed offset.
    lag = {p: marks[p][1] - o for p, o in offsets.items() if o >= 0}
    assert sum(o for o in offsets.values() if o >= 0) == CONSUMED
    browser.get(f"{stack.console}/groups")
    assert texts(browser, f'tr[data-group="{GROUP}"] td.lag') == [str(sum(lag.values()))]
    shoot("groups")
    browser.get(f"{stack.console}/group?id={GROUP}")
    assert texts(browser, "#group-state") == ["Empty"]
    shown = {
        int(row.get_attribute("data-tp").rsplit("-", 1)[1]): row.find_element(By.CSS_SELECTOR, "td.lag").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#offsets tbody tr[data-tp]")
    }
    assert shown == {p: str(n) for p, n in lag.items()}
    shoot("group")
    browser.get(f"{stack.console}/compaction")
    assert browser.find_elements(By.ID, "candidates") and browser.find_elements(By.ID, "gc")
    shoot("compaction")


def test_admin_creates_a_topic_through_the_confirmation(
    stack: Stack, browser: WebDriver, shoot: Callable[[str], None]
) -> None:
    sign_in(browser, stack, ADMIN)
    browser.get(f"{stack.console}/topics")
    browser.find_element(By.ID, "new-topic-name").send_keys("made-in-console")
    count = browser.find_element(By.ID, "new-topic-partitions")
    count.clear()
    count.send_keys("2")
    browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
    assert "made-in-console with 2 partitions" in browser.find_element(By.ID, "confirm-summary").text
    shoot("confirm")
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    assert "made-in-console" not in admin.list_topics(timeout=10).topics  # nothing before the confirmation
    browser.find_element(By.ID, "confirm-button").click()
    assert "Created topic made-in-console" in browser.find_element(By.ID, "done-message").text
    # Asked by name: the agent's cached full topic list may be up to its TTL old (agent.topic_cache).
    listed = admin.list_topics(topic="made-in-console", timeout=10).topics
    assert listed["made-in-console"].error is None and len(listed["made-in-console"].partitions) == 2
