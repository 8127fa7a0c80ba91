"""The metadata service's token roles (metadata.server.auth enforces them; each operation in
`metadata.wire.operations` declares which may call it; admin may call everything)."""

from __future__ import annotations

AGENT = "agent"
COMPACTOR = "compactor"
READER = "reader"
# Registers schemas in the schema registry (producers whose serializers auto-register); reads
# them too. Deleting schemas and setting compatibility or modes is admin's.
WRITER = "writer"
ADMIN = "admin"
ROLES = frozenset({AGENT, COMPACTOR, READER, WRITER, ADMIN})
# The read-only lookups every role makes.
READ = (AGENT, COMPACTOR, READER)
