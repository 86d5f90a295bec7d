"""The Cloud Billing catalog read of `pulumi up` (pricing/catalog.py), through Google's client
library (google-cloud-billing, REST transport) against a stand-in on 127.0.0.1 that answers as
the API documents (Cloud Billing "Get Google Cloud pricing information": GET
/v1/services/{service}/skus -> {"skus": [...], "nextPageToken": ...}; a SKU's description,
category, serviceRegions, and pricingInfo[].pricingExpression.tieredRates[].unitPrice with
units (int64, a JSON string) + nanos). The descriptions are the catalog's own: "A3 Instance Core
running in Americas", "Spot Preemptible A3 Instance Ram running in Americas", "H200 141GB GPU
running in Americas", "N4 Instance Core running in Americas" (the strings SkyPilot's
fetch_gcp.py matches, as other catalog readers quote them). Prices are test values.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from pricing.table import A3U_ON_DEMAND
from config.profiles import Capacity, Mode
from tests.test_cost import settings_for
from pricing import catalog as live_prices
from pricing.billing import price_book, up_block

SKUS_PATH = f"/v1/{live_prices.COMPUTE_SERVICE}/skus"


def sku(description: str, group: str, usage: str, usd: float, regions: list[str]) -> dict[str, Any]:
    units, fraction = divmod(round(usd * 1e9), 10**9)
    unit = {"GPU": "h", "CPU": "h", "RAM": "GiBy.h"}[group]
    return {
        "name": f"services/6F81-5844-456A/skus/{abs(hash(description)) % 10**12:012d}",
        "skuId": "TEST-" + description[:8],
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "effectiveTime": "2026-12-01T00:00:00Z",
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": fraction,
                            },
                        }
                    ],
                },
                "currencyConversionRate": 1,
            }
        ],
        "serviceProviderName": "Google",
    }


US = ["us-central1", "us-east4"]


def attached_h200(model: str, usage: str, usd: float) -> dict[str, Any]:
    """The H200 SKU of a provisioning model: "H200 141GB GPU attached to <model> VMs running in
    Americas" (as "Nvidia Tesla A100 80GB GPU attached to DWS Defined Duration VMs" is named)."""
    description = f"H200 141GB GPU attached to {model} VMs running in Americas"
    return sku(description, "GPU", usage, usd, US)


# Test prices: A3 core $0.03/h, RAM $0.003/GiB-h, H200 $9.31174/h; Spot 0.01, 0.001, 3.7247;
# flex-start (DWS Defined Duration) 0.02, 0.002, 5.0; N4 core 0.04, RAM 0.004.
PAGE_1 = [
    sku("A3 Instance Core running in Americas", "CPU", "OnDemand", 0.03, US),
    sku("A3 Instance Ram running in Americas", "RAM", "OnDemand", 0.003, US),
    sku("H200 141GB GPU running in Americas", "GPU", "OnDemand", 9.31174, US),
    # Another region's price must not be used for us-central1.
    sku("H200 141GB GPU running in Belgium", "GPU", "OnDemand", 99.0, ["europe-west1"]),
    # A commitment SKU is not a list price.
    sku("Commitment v1: A3 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", 0.001, US),
]
PAGE_2 = [
    sku("Spot Preemptible A3 Instance Core running in Americas", "CPU", "Preemptible", 0.01, US),
    sku("Spot Preemptible A3 Instance Ram running in Americas", "RAM", "Preemptible", 0.001, US),
    attached_h200("Spot Preemptible", "Preemptible", 3.7247),
    sku("DWS Defined Duration A3 Core running in Americas", "CPU", "OnDemand", 0.02, US),
    sku("DWS Defined Duration A3 Ram running in Americas", "RAM", "OnDemand", 0.002, US),
    attached_h200("DWS Defined Duration", "OnDemand", 5.0),
    sku("N4 Instance Core running in Americas", "CPU", "OnDemand", 0.04, US),
    sku("N4 Instance Ram running in Americas", "RAM", "OnDemand", 0.004, US),
]
DISABLED = {
    "error": {
        "code": 403,
        "message": "Cloud Billing API has not been used in project 123 before or it is disabled.",
        "status": "PERMISSION_DENIED",
    }
}


class StandIn(BaseHTTPRequestHandler):
    """Two pages of SKUs, or the API's 403 when `disabled`."""

    disabled = False
    seen: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        type(self).seen.append(query)
        if url.path != SKUS_PATH:
            return self._answer(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        if self.disabled:
            return self._answer(403, DISABLED)
        if query.get("pageToken") == ["page-2"]:
            return self._answer(200, {"skus": PAGE_2, "nextPageToken": ""})
        return self._answer(200, {"skus": PAGE_1, "nextPageToken": "page-2"})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[str]:
    StandIn.disabled, StandIn.seen = False, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def client_for(host: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.billing_v1 import CloudCatalogClient
    from google.cloud.billing_v1.services.cloud_catalog.transports.rest import (
        CloudCatalogRestTransport,
    )

    transport = CloudCatalogRestTransport(
        host=host, credentials=AnonymousCredentials(), url_scheme="http"
    )
    return CloudCatalogClient(transport=transport)


def test_node_prices_are_built_from_the_skus_of_the_stacks_region_and_mode(stand_in: str) -> None:
    """a3-ultragpu-8g: 224 vCPUs, 2952 GiB, 8 H200 (config/profiles.py). By hand:
    on-demand  224 x 0.03 + 2952 x 0.003 + 8 x 9.31174 = 6.72 + 8.856 + 74.49392 = 90.06992
    Spot       224 x 0.01 + 2952 x 0.001 + 8 x 3.7247  = 2.24 + 2.952 + 29.7976  = 34.9896
    flex-start 224 x 0.02 + 2952 x 0.002 + 8 x 5.0     = 4.48 + 5.904 + 40.0     = 50.384
    n4-highmem-16 (16 vCPUs, 128 GiB): 16 x 0.04 + 128 x 0.004 = 0.64 + 0.512 = 1.152"""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    read = live_prices.read_catalog(settings, lambda: client_for(stand_in))
    assert read.gpu[Capacity.RESERVATION].usd == pytest.approx(90.06992)
    assert read.gpu[Capacity.SPOT].usd == pytest.approx(34.9896)
    assert read.gpu[Capacity.FLEX_START].usd == pytest.approx(50.384)
    assert read.cpu is not None and read.cpu.usd == pytest.approx(1.152)
    assert read.gpu[Capacity.SPOT].source == live_prices.CATALOG_SOURCE
    # Both pages were read, in US dollars.
    assert [q.get("pageToken") for q in StandIn.seen] == [None, ["page-2"]]
    assert all(q.get("currencyCode") == ["USD"] for q in StandIn.seen)
    assert "13 SKUs read" in read.note


def test_the_catalog_wins_over_the_table_and_the_users_rate_over_both(stand_in: str) -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    read = live_prices.read_catalog(settings, lambda: client_for(stand_in))
    book = price_book(settings, read)
    assert book.stack_gpu(settings).usd == pytest.approx(34.9896)
    text = up_block(settings, book, 58)
    assert "Cloud Billing catalog read: 13 SKUs read" in text
    assert "$34.99 per node-hour x 2 nodes = $69.98/h (Cloud Billing Catalog API" in text
    own = settings.model_copy(update={"gpu_node_hourly_usd": 20.0})
    book = price_book(own, read)
    assert book.stack_gpu(own).usd == 20.0
    # The other modes keep the catalog's figures for comparison.
    assert book.gpu[Capacity.RESERVATION].usd == pytest.approx(90.06992)


def test_a_disabled_api_leaves_the_tables_figures_with_the_reason(stand_in: str) -> None:
    StandIn.disabled = True
    settings = settings_for("a3u", Mode.STANDARD, Capacity.RESERVATION)
    read = live_prices.read_catalog(settings, lambda: client_for(stand_in))
    assert not read.gpu and read.cpu is None
    assert read.note.startswith("Forbidden: 403 GET") and "disabled" in read.note
    book = price_book(settings, read)
    assert book.stack_gpu(settings).usd == A3U_ON_DEMAND
    text = up_block(settings, book, 58)
    assert "Cloud Billing catalog not read (Forbidden: 403" in text
    assert "the table's figures are used" in text


def test_no_catalog_answer_at_all_never_raises() -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.FLEX_START)

    def refused() -> Any:
        raise OSError("no route to the API")

    read = live_prices.read_catalog(settings, refused)
    assert read.note == "OSError: no route to the API" and not read.gpu


def test_a4x_has_no_sku_of_its_own_and_keeps_the_tables_answer(stand_in: str) -> None:
    settings = settings_for("a4x", Mode.STANDARD, Capacity.RESERVATION)
    read = live_prices.read_catalog(settings, lambda: client_for(stand_in))
    assert Capacity.RESERVATION not in read.gpu
    assert price_book(settings, read).stack_gpu(settings).usd is None


def test_a_part_matched_by_skus_of_different_prices_is_not_priced() -> None:
    """Two OnDemand H200 SKUs of us-central1 whose descriptions both name the GPU leave no way to
    tell which one the node bills: no catalog figure (the table's stays), never the first listed.
    SkyPilot's catalog shows such pairs exist (pricing/catalog.py node_price)."""
    from google.cloud.billing_v1 import Sku

    def protos(rows: list[dict[str, Any]]) -> list[Any]:
        return [Sku.from_json(json.dumps(row)) for row in rows]

    node = live_prices.Node("A3", 224, 2952.0, "H200 141GB GPU", 8)
    host = [row for row in PAGE_1 if "A3 Instance" in row["description"]]
    gpu = sku("H200 141GB GPU running in Americas", "GPU", "OnDemand", 9.31174, US)
    other = sku("H200 141GB GPU Extended running in Americas", "GPU", "OnDemand", 4.5, US)
    on_demand, region = Capacity.ON_DEMAND, "us-central1"
    priced = live_prices.node_price(protos([*host, gpu]), node, on_demand, region)
    assert priced == pytest.approx(90.06992)
    # The same price listed twice is not ambiguous.
    twice = live_prices.node_price(protos([*host, gpu, gpu]), node, on_demand, region)
    assert twice == pytest.approx(90.06992)
    for rows in ([*host, gpu, other], [*host, other, gpu]):
        assert live_prices.node_price(protos(rows), node, on_demand, region) is None
