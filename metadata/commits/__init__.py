"""The commit path and its storage: planning a file commit (`plan`, pure), recording it
(`path`), batching concurrent commits into one database transaction (`batching`), the
per-database storage layer (`storage`, `storage_pg`, `storage_sqlite`), idempotent
producers, the object check and the commit feed that wakes waiting fetches.
"""
