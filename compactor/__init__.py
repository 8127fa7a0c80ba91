"""Compaction: planner, the pure two-pass dedup, the job that streams files and writes the output, retention and garbage collection."""
