"""The metadata service's token roles (metadata.server.auth enforces them; each operation in
`metadata.wire.operations` declares which may call it; admin may call everything)."""

from __future__ import annotations

AGENT = "agent"
COMPACTOR = "compactor"
READER = "reader"
ADMIN = "admin"
ROLES = frozenset({AGENT, COMPACTOR, READER, ADMIN})
# The read-only lookups every role makes.
READ = (AGENT, COMPACTOR, READER)
