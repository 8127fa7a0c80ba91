"""The schema registry: Confluent Schema Registry's model (subjects, versions, global schema
ids, compatibility levels, modes) stored in the metadata database and served by the metadata
service (`metadata.server.registry_api` speaks Confluent's REST API over it)."""
