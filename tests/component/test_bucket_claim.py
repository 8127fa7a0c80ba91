"""The cluster's bucket in metadata (metadata.membership.claim_bucket): configured beats
learned, the first claim teaches it, another bucket is INVALID_CONFIG, a trailing slash is
the same bucket."""

from __future__ import annotations

from pathlib import Path

import pytest
from skiff.metadata.errors import INVALID_CONFIG, MetadataError
from skiff.metadata.service import MetadataService


def _service(tmp_path: Path, bucket_url: str | None = None) -> MetadataService:
    return MetadataService.from_url(
        f"sqlite:///{tmp_path / 'md.db'}", bucket_url=bucket_url, verify_objects=False
    )


def test_the_first_claim_teaches_the_bucket(tmp_path: Path) -> None:
    svc = _service(tmp_path)
    try:
        assert svc.bucket_url() is None
        assert svc.claim_bucket("s3://data/skiff") == "s3://data/skiff"
        assert svc.bucket_url() == "s3://data/skiff"
        assert svc.claim_bucket("s3://data/skiff/") == "s3://data/skiff"  # the same bucket
        with pytest.raises(MetadataError) as e:
            svc.claim_bucket("s3://other/skiff")
        assert e.value.error_code == INVALID_CONFIG
        assert "learned from its first agent" in e.value.message and "s3://other/skiff" in e.value.message
    finally:
        svc.close()


def test_a_configured_bucket_refuses_another(tmp_path: Path) -> None:
    svc = _service(tmp_path, "memory://b")
    try:
        assert svc.claim_bucket("memory://b") == "memory://b"
        with pytest.raises(MetadataError, match="configured with --bucket"):
            svc.claim_bucket("memory://c")
        assert svc.bucket_url() == "memory://b"
    finally:
        svc.close()
