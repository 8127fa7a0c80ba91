"""The bill's estimate (fileformat.objectstore.pricing): S3 Standard list prices by default,
request kinds priced by class (PUT/LIST write-class, GET/HEAD read-class, DELETE free),
prices from the environment (a bad value refused by name), storage per hour, and the cost
per hour over a sliding window of samples on an injected clock."""

from __future__ import annotations

import pytest
from skiff.fileformat.objectstore.pricing import GIB, CostRate, Prices


def test_defaults_are_s3_standard_list_prices_by_request_class() -> None:
    p = Prices()
    usd = p.requests_usd({"put": 1000, "list": 1000, "get_range": 1000, "head": 1000, "delete": 5000})
    assert usd == pytest.approx(0.005 + 0.005 + 0.0004 + 0.0004)
    assert p.storage_usd_per_hour(1000 * GIB) == pytest.approx(23.0 / 730)


def test_prices_come_from_the_environment_and_bad_values_are_named() -> None:
    p = Prices.from_env({"SKIFF_PRICE_WRITE_REQUESTS_PER_1000_USD": "0.0045"})
    assert p.write_per_1000_usd == 0.0045
    assert p.read_per_1000_usd == 0.0004
    with pytest.raises(ValueError, match="SKIFF_PRICE_STORAGE_GB_MONTH_USD"):
        Prices.from_env({"SKIFF_PRICE_STORAGE_GB_MONTH_USD": "-1"})


def test_cost_per_hour_over_the_last_hour_of_samples() -> None:
    now = [0.0]
    rate = CostRate(lambda: now[0])
    now[0] = 1800.0
    assert rate.per_hour(1.0) == pytest.approx(2.0)  # 1 USD in half an hour
    now[0] = 3600.0
    assert rate.per_hour(1.0) == pytest.approx(1.0)  # nothing more in the second half
    now[0] = 5400.0
    assert rate.per_hour(1.0) == pytest.approx(0.0)  # the window starts at the 1800 s sample
