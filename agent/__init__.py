"""The Kafka protocol server (asyncio): framing, one handler per Kafka API, the produce buffer, the fetch path and its cache, the purgatory, the group coordinator, and the `skiff` command line."""
