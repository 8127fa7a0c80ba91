#!/usr/bin/env bash
# System packages and services the test suite needs: kcat (Debian), a JDK, Node.js and npm
# (KafkaJS), kubectl (its
# built-in kustomize renders deploy/kubernetes), promtool (Debian's prometheus package:
# only its promtool is used, to check deploy/monitoring), PostgreSQL running.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
command -v kubectl >/dev/null 2>&1 || need+=(kubectl)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# KafkaJS (tests/support/kafkajs.py) runs on Node.js; npm installs it from the npm registry.
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    # kubectl from the configured apt sources when they carry it (kustomize v5), else
    # Debian's own kubernetes-client.
    if [[ " ${need[*]} " == *" kubectl "* ]] && ! apt-cache show kubectl >/dev/null 2>&1; then
        need=("${need[@]/kubectl/kubernetes-client}")
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# PostgreSQL on 127.0.0.1:5432 with trust auth is what the tests expect (see README).
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 || { echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
# The web console's browser test (tests/e2e/test_console_browser.py): Debian's chromium and
# its chromedriver, driven by Selenium; nothing is downloaded at test time.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
