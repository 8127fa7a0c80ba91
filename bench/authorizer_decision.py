"""The cost of one ACL decision (agent.authorizer), in memory, as the handlers make it.

    python bench/authorizer_decision.py

1,000 literal topic bindings for 50 principals plus 100 prefixed ones; times a decision
answered from the memo (what a client's second and later requests cost), one computed
from the index (the first), and building the authorizer (once per ACL version).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.agent.authorizer import Authorizer  # noqa: E402
from skiff.metadata.security.acl_types import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


def main() -> None:
    topic, allow = ResourceType.TOPIC, AclPermissionType.ALLOW
    bindings = [
        AclBinding(
            topic, f"topic-{i}", PatternType.LITERAL, f"User:u{i % 50}", "*", AclOperation.WRITE, allow
        )
        for i in range(1000)
    ] + [
        AclBinding(topic, f"team{i}-", PatternType.PREFIXED, f"User:u{i}", "*", AclOperation.READ, allow)
        for i in range(100)
    ]
    a = Authorizer(bindings)
    args = ("User:u7", "10.0.0.1", AclOperation.WRITE, topic, "topic-7")
    n = 200_000
    memo = timeit.timeit(lambda: a.authorize(*args), number=n) / n
    computed = timeit.timeit(lambda: a._decide(*args), number=n) / n
    build = timeit.timeit(lambda: Authorizer(bindings), number=20) / 20
    print(
        f"| {len(bindings)} bindings | memoised {memo * 1e6:.2f} us | computed {computed * 1e6:.2f} us "
        f"| build {build * 1e3:.1f} ms |"
    )


if __name__ == "__main__":
    main()
