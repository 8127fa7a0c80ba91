"""Shared pytest configuration: fixtures for the real services the tests need live in
`tests/support/` (one plugin module per service) and are registered here."""

pytest_plugins = [
    "tests.support.s3servers",
    "tests.support.pg",
    "tests.support.agents",
    "tests.support.java_client",
    "tests.support.kafkajs",
    "tests.support.metadata_fixtures",
]
