"""Compaction's side of metadata: which partitions need work (`rules`, `planning`), job
leases and cleaner checkpoints (`leases`), the atomic swap (`swap`) and their values.
"""
