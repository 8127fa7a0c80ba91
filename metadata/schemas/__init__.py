"""The schema registry: Confluent-compatible schemas, subjects, versions and compatibility checks."""
