"""The shell commands README.md and docs/*.md show, and what the tests do with each.

Every command of a fenced ```sh or ```bash block (a line; `\\` continuations and a
heredoc up to its terminator belong to their line; blank and comment lines are not
commands) is in exactly one of three lists, keyed by its first line:

- `RUN_HERE`: executed by tests/e2e/test_docs_commands.py against a playground started by
  the README's own command, with the substitutions `adapt` makes (the test's ports,
  interpreter and files for the documented `localhost:9092`, `.venv/bin/`, `<file>`);
- `RUN_ELSEWHERE`: executed as written by the named test;
- `CANNOT_RUN`: not executable in the test environment, with the reason (reviewed: each
  needs a container engine, a Kubernetes cluster, a published registry or a resource the
  machine does not have, or is the test suite itself).

Synopses (`skiff topics describe [T ...]`) and diagrams are in untagged blocks: not commands.
tests/unit/test_docs_commands.py checks that the lists match the documents exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(sh|bash)\n(.*?)^```", re.S | re.M)
_HEREDOC = re.compile(r"<<-?'?(\w+)'?")


@dataclass(frozen=True)
class DocCommand:
    doc: str  # path relative to the repository
    text: str  # the whole command, continuations and heredoc included

    @property
    def key(self) -> str:
        return self.text.splitlines()[0].strip()


def commands_of(text: str, doc: str) -> list[DocCommand]:
    out: list[DocCommand] = []
    for block in _FENCE.finditer(text):
        lines = block.group(2).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = [line]
            while parts[-1].rstrip().endswith("\\") and i < len(lines):
                parts.append(lines[i])
                i += 1
            heredoc = _HEREDOC.search(line)
            if heredoc:
                while i < len(lines):
                    parts.append(lines[i])
                    i += 1
                    if parts[-1].strip() == heredoc.group(1):
                        break
            out.append(DocCommand(doc, "\n".join(parts)))
    return out


def all_commands() -> list[DocCommand]:
    return [c for path in DOCS for c in commands_of(path.read_text(), str(path.relative_to(REPO)))]


RUN_HERE = [
    "bash scripts/playground.sh",
    "bash scripts/playground.sh --demo",
    ".venv/bin/skiff topics describe",
    ".venv/bin/skiff groups describe demo-dashboard",
    ".venv/bin/skiff topics describe demo-customers --bootstrap-server localhost:9092",
    "echo 'hello' | kcat -b localhost:9092 -t demo -P -k key1",
    "kcat -b localhost:9092 -t demo -C -e -f '%p %o %k %s\\n'",
    ".venv/bin/skiff inspect skiff-data/bucket/segments/<file>.seg",
    ".venv/bin/skiff inspect skiff-data/bucket/segments/<file>.seg --metadata http://localhost:9093  # topic names, offsets",
    "skiff users create app1 --metadata http://skiff-metadata:9093 --password-file /run/secrets/app1",
    "skiff users list --metadata http://skiff-metadata:9093",
    "skiff users delete app1 --metadata http://skiff-metadata:9093",
    "cat > orders-v1.avsc <<'EOF'",
    ".venv/bin/skiff schemas register orders-value --schema orders-v1.avsc --metadata http://localhost:9093",
    ".venv/bin/skiff schemas get orders-value --metadata http://localhost:9093",
    ".venv/bin/skiff schemas list --metadata http://localhost:9093",
    "curl http://localhost:9093/subjects",
    "curl http://localhost:9093/subjects/orders-value/versions/latest",
    "curl http://localhost:9093/schemas/ids/1",
    ".venv/bin/skiff schemas config orders-value --compatibility FULL --metadata http://localhost:9093",
]

RUN_ELSEWHERE = {
    ".venv/bin/python - <<'EOF'": "tests/e2e/test_readme_quickstart.py (the README's Python block, as written)",
}

_ENGINE = "needs a container engine that can pull python:3.11-slim; the test machines have neither (docs/operations.md); tests/unit/test_deploy_dockerfile.py checks the Dockerfile"
_CLUSTER = "needs a Kubernetes cluster; tests/unit/test_deploy_manifests.py renders (kubectl kustomize) and validates the same overlays"
_SUITE = "is the test suite itself (every lane, tens of minutes); the CI workflow runs it"

CANNOT_RUN = {
    "bash scripts/test.sh": _SUITE,
    "bash scripts/test.sh                    # set up, then every check and test, in lanes": _SUITE,
    "bash scripts/test.sh tests/unit -x      # set up, then one plain serial pytest with these arguments": _SUITE
    + " (this one: the whole unit tier, run by the suite's unit lane)",
    ".venv/bin/skiff inspect s3://my-bucket/prefix/segments/<file>.seg --verify": "names a real S3 bucket;"
    " tests/e2e/test_inspect_cli.py runs `skiff inspect s3://... --verify` against a local S3 server",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[spark]'": "would reinstall the test's own environment;"
    " scripts/setup.sh runs this install (`pip install -e '.[test,spark]'`) for every test run",
    "kubectl apply -k deploy/kubernetes/overlays/dev          # self-contained: PostgreSQL, S3, 1 agent": _CLUSTER,
    "kubectl apply -k deploy/kubernetes/overlays/production   # external PostgreSQL and S3, TLS, SASL, tokens": _CLUSTER,
    "kubectl apply -k deploy/kubernetes/overlays/dev": _CLUSTER,
    "kubectl wait --for=condition=complete job/skiff-create-bucket --timeout=300s": _CLUSTER,
    "kubectl wait --for=condition=available deployment/skiff-agent deployment/skiff-metadata --timeout=300s": _CLUSTER,
    "kubectl apply -n skiff -k deploy/kubernetes/overlays/production": _CLUSTER,
    "kind load docker-image skiff:dev             # kind": _CLUSTER + " (kind)",
    "minikube image load skiff:dev                # or minikube": _CLUSTER + " (minikube)",
    "docker build -f deploy/Dockerfile -t skiff:dev .": _ENGINE,
    "podman build -f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore -t skiff:dev .": _ENGINE,
    "docker tag skiff:dev registry.example.com/skiff:0.1.0": _ENGINE + " (and the built image)",
    "docker push registry.example.com/skiff:0.1.0": "pushes to a registry (registry.example.com is a placeholder)",
    "cd deploy/kubernetes/overlays/production": "the first half of the standalone-kustomize edit below",
    "kustomize edit set image skiff=registry.example.com/team/skiff:0.1.0   # the standalone kustomize": "needs the"
    " standalone kustomize (not installed; kubectl kustomize renders but does not edit) and would edit the"
    " checked-in overlay; tests/unit/test_deploy_manifests.py checks the overlays' images: entries",
    "deploy/kubernetes/create-secrets.sh --namespace skiff \\": "creates Secrets in a cluster from certificate"
    " files; tests/unit/test_deploy_manifests.py runs the script (--dry-run) and checks it makes every Secret"
    " the production overlay names",
}
