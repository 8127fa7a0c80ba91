"""The metadata service over HTTP (`app`, `routes` derived from the declared operations,
`auth`, `health`) and the in-process client over a `MetadataService` (`local_client`).
"""
