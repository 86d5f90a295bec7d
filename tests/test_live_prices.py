"""The Cloud Billing catalog read of `pulumi up` (pricing/catalog.py), through Google's client
library (google-cloud-billing, REST transport) against a stand-in on 127.0.0.1 that answers as
the API documents (Cloud Billing "Get Google Cloud pricing information": GET
/v1/services/{service}/skus -> {"skus": [...], "nextPageToken": ...}; a SKU's description,
category, serviceRegions, and pricingInfo[].pricingExpression.tieredRates[].unitPrice with
units (int64, a JSON string) + nanos).

Which descriptions are real. Quoted from public catalog readers (not read from the API here): "A3
Instance Core/Ram running in Americas" and "Spot Preemptible A3 Instance Core/Ram running in
Americas" (readers' family tables; SkyPilot's fetch_gcp.py matches "A3 Instance"), "Commitment v1:
A3 Cpu" / "Commitment v1: A3 Ram" (prefixes), "H200 141GB GPU running in Americas" ($9.31174 in a
reader's fixture of catalog data of 2026-07-07), "H200 141GB GPU running in Belgium", "Nvidia H100
80GB GPU running in Americas" (A3 High, $9.79655), "Nvidia H100 80GB Plus GPU running in Americas"
(A3 Mega, $10.344276), "A3Plus Instance Core running in Americas" (A3 Mega's host), "A4 Nvidia B200
(1 gpu slice) running in Americas" ($16.11), "Spot Preemptible A4 Nvidia B200 (1 gpu slice) running
in Americas" (with the OnDemand usage type, as readers' fixtures list it), "Commitment v1: A4
Nvidia B200 (1 gpu slice) in ... for 1 Year" (a reader's pattern), "Nvidia H100 Mega 80GB GPU
attached to DWS Defined Duration VMs running in Americas"; Kubernetes Engine's "Autopilot
Accelerator CPU Premium (us-central1)", "Autopilot Accelerator Memory Premium (...)", "Autopilot
H100 80GB Premium (...)", "Autopilot Performance CPU/Memory Premium (...)" (GoogleCloudPlatform/
autopilot-cost-calculator calculator/pricing.go matches these names exactly).
INVENTED here, modelled on those patterns (no quote of them was found): "A3 Mega Instance Core" (an
adversarial near-miss), "H200 141GB GPU attached to Spot Preemptible VMs ..." (after "Nvidia H100
80GB GPU attached to Spot Preemptible VMs running in Americas"), "DWS Defined Duration A3 Core/Ram
..." (after "DWS Defined Duration A2 Core/Ram"), the H200 and A4 slice "... attached to DWS Defined
Duration VMs ..." SKUs, the "Commitment v1: ..." SKUs' full texts (the A3 host's, H200's, A4's; the
H100 one as a reader's fixture writes it), "N4 Instance Core/Ram ..." (after "C4 Instance Core"),
"A3 Ultra Instance Core/Ram running in Americas" (public billing data names "DWS Defined Duration
A3 Ultra Instance Core"), "H200 141GB GPU Extended ..." (adversarial), and the Autopilot "H200
141GB", "H200 141GB Spot" and "B200" premium names (after "Autopilot H100 80GB Premium" / "... Spot
Premium").
Prices are test values.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from config.profiles import Capacity, Mode
from pricing import catalog as live_prices
from pricing.billing import price_book
from pricing.table import A3U_ON_DEMAND
from pricing.whole_run import RunFacts, up_block
from tests.test_cost import settings_for

COMPUTE_PATH = f"/v1/{live_prices.COMPUTE_SERVICE}/skus"
GKE_PATH = f"/v1/{live_prices.GKE_SERVICE}/skus"
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
FACTS = RunFacts(58, "test", 2_097_152, 32_763_876_352)


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
AMERICAS = "running in Americas"
COMMIT = "Commitment v1:"
SLICE = "A4 Nvidia B200 (1 gpu slice)"
SPOT_VMS, DWS_VMS = "Spot Preemptible VMs", "DWS Defined Duration VMs"

# Test prices. A3 core $0.03/h, RAM $0.003/GiB-h, H200 $9.31174/h; Spot 0.01, 0.001, 3.7247;
# flex-start (DWS Defined Duration) 0.02, 0.002, 5.0; 1-year commitment 0.001, 0.0005, 6.0;
# A4 slice $16.11, Spot $4.9542, DWS $11.277, 1-year commitment $10.0; N4 core 0.04, RAM 0.004.
PAGE_1 = [
    sku(f"A3 Instance Core {AMERICAS}", "CPU", "OnDemand", 0.03, US),
    sku(f"A3 Instance Ram {AMERICAS}", "RAM", "OnDemand", 0.003, US),
    sku(f"H200 141GB GPU {AMERICAS}", "GPU", "OnDemand", 9.31174, US),
    # Another region's price must not be used for us-central1.
    sku("H200 141GB GPU running in Belgium", "GPU", "OnDemand", 99.0, ["europe-west1"]),
    # A3 High's and A3 Mega's GPUs, and a host SKU of another A3 member: never A3 Ultra's.
    sku(f"Nvidia H100 80GB GPU {AMERICAS}", "GPU", "OnDemand", 9.79655, US),
    sku(f"Nvidia H100 80GB Plus GPU {AMERICAS}", "GPU", "OnDemand", 10.34428, US),
    sku(f"A3Plus Instance Core {AMERICAS}", "CPU", "OnDemand", 0.6, US),
    sku(f"A3 Mega Instance Core {AMERICAS}", "CPU", "OnDemand", 0.5, US),
    sku(f"{COMMIT} Nvidia H100 80GB GPU {AMERICAS} for 1 Year", "GPU", "Commit1Yr", 4.0, US),
    sku(f"{COMMIT} A3 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", 0.001, US),
    sku(f"{COMMIT} A3 Ram in Americas for 1 Year", "RAM", "Commit1Yr", 0.0005, US),
    sku(f"{COMMIT} H200 141GB GPU {AMERICAS} for 1 Year", "GPU", "Commit1Yr", 6.0, US),
    # A4: billed per GPU slice, no Core or Ram SKU of its own.
    sku(f"{SLICE} {AMERICAS}", "GPU", "OnDemand", 16.11, US),
    sku(f"Spot Preemptible {SLICE} {AMERICAS}", "GPU", "OnDemand", 4.9542, US),
    sku(f"{COMMIT} {SLICE} in Americas for 1 Year", "GPU", "Commit1Yr", 10.0, US),
]  # fmt: skip
PAGE_2 = [
    sku(f"Spot Preemptible A3 Instance Core {AMERICAS}", "CPU", "Preemptible", 0.01, US),
    sku(f"Spot Preemptible A3 Instance Ram {AMERICAS}", "RAM", "Preemptible", 0.001, US),
    sku(f"H200 141GB GPU attached to {SPOT_VMS} {AMERICAS}", "GPU", "Preemptible", 3.7247, US),
    sku(f"DWS Defined Duration A3 Core {AMERICAS}", "CPU", "OnDemand", 0.02, US),
    sku(f"DWS Defined Duration A3 Ram {AMERICAS}", "RAM", "OnDemand", 0.002, US),
    sku(f"H200 141GB GPU attached to {DWS_VMS} {AMERICAS}", "GPU", "OnDemand", 5.0, US),
    sku(f"Nvidia H100 Mega 80GB GPU attached to {DWS_VMS} {AMERICAS}", "GPU", "OnDemand", 4.0, US),
    sku(f"{SLICE} attached to {DWS_VMS} {AMERICAS}", "GPU", "OnDemand", 11.277, US),
    sku(f"N4 Instance Core {AMERICAS}", "CPU", "OnDemand", 0.04, US),
    sku(f"N4 Instance Ram {AMERICAS}", "RAM", "OnDemand", 0.004, US),
]  # fmt: skip
# Kubernetes Engine: the Autopilot premiums (test prices): Accelerator vCPU $0.001/h, GiB
# $0.0001/h, H200 $0.05/h and B200 $0.08/h per GPU; Performance vCPU $0.002, GiB $0.0002.
GKE_SKUS = [
    sku("Autopilot Accelerator CPU Premium (us-central1)", "CPU", "OnDemand", 0.001, US),
    sku("Autopilot Accelerator Memory Premium (us-central1)", "RAM", "OnDemand", 0.0001, US),
    sku("Autopilot H100 80GB Premium (us-central1)", "GPU", "OnDemand", 0.04, US),
    sku("Autopilot H200 141GB Premium (us-central1)", "GPU", "OnDemand", 0.05, US),
    sku("Autopilot H200 141GB Spot Premium (us-central1)", "GPU", "OnDemand", 0.02, US),
    sku("Autopilot B200 Premium (us-central1)", "GPU", "OnDemand", 0.08, US),
    sku("Autopilot Performance CPU Premium (us-central1)", "CPU", "OnDemand", 0.002, US),
    sku("Autopilot Performance Memory Premium (us-central1)", "RAM", "OnDemand", 0.0002, US),
    sku("Autopilot Accelerator CPU Premium (europe-west4)", "CPU", "OnDemand", 9.0, US),
]
DISABLED = {
    "error": {
        "code": 403,
        "message": "Cloud Billing API has not been used in project 123 before or it is disabled.",
        "status": "PERMISSION_DENIED",
    }
}


class StandIn(BaseHTTPRequestHandler):
    """Two pages of Compute Engine SKUs, one of Kubernetes Engine's, or the API's 403."""

    disabled = False
    extra: list[dict[str, Any]] = []
    seen: list[tuple[str, dict[str, list[str]]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        type(self).seen.append((url.path, query))
        if url.path not in (COMPUTE_PATH, GKE_PATH):
            return self._answer(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
        if self.disabled:
            return self._answer(403, DISABLED)
        if url.path == GKE_PATH:
            return self._answer(200, {"skus": GKE_SKUS, "nextPageToken": ""})
        if query.get("pageToken") == ["page-2"]:
            return self._answer(200, {"skus": PAGE_2 + self.extra, "nextPageToken": ""})
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


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test reads and writes its own cache folder, never the user's."""
    monkeypatch.setenv(live_prices.CACHE_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def stand_in() -> Iterator[str]:
    StandIn.disabled, StandIn.seen, StandIn.extra = False, [], []
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


def read(stack: str, mode: Mode, capacity: Capacity, host: str, now: datetime = NOW) -> Any:
    settings = settings_for(stack, mode, capacity)
    return live_prices.read_catalog(settings, lambda: client_for(host), now=now)


def test_a3_ultra_is_priced_from_its_own_gpu_and_the_a3_host_skus(stand_in: str) -> None:
    """a3-ultragpu-8g: 224 vCPUs, 2952 GiB, 8 H200 (config/profiles.py). By hand:
    on-demand  224 x 0.03 + 2952 x 0.003 + 8 x 9.31174 = 6.72 + 8.856 + 74.49392 = 90.06992
    Spot       224 x 0.01 + 2952 x 0.001 + 8 x 3.7247  = 2.24 + 2.952 + 29.7976  = 34.9896
    flex-start 224 x 0.02 + 2952 x 0.002 + 8 x 5.0     = 4.48 + 5.904 + 40.0     = 50.384
    1-year     224 x 0.001 + 2952 x 0.0005 + 8 x 6.0   = 0.224 + 1.476 + 48.0    = 49.7
    n4-highmem-16 (16 vCPUs, 128 GiB): 16 x 0.04 + 128 x 0.004 = 0.64 + 0.512 = 1.152
    A3 High's H100, A3 Mega's H100 Plus, its "A3Plus Instance Core" and the invented "A3 Mega
    Instance Core" change nothing."""
    got = read("a3u", Mode.STANDARD, Capacity.SPOT, stand_in)
    assert got.gpu[Capacity.RESERVATION].usd == pytest.approx(90.06992)
    assert got.gpu[Capacity.SPOT].usd == pytest.approx(34.9896)
    assert got.gpu[Capacity.FLEX_START].usd == pytest.approx(50.384)
    assert got.committed[live_prices.COMMIT_1Y].usd == pytest.approx(49.7)
    assert live_prices.COMMIT_3Y not in got.committed
    assert got.cpu is not None and got.cpu.usd == pytest.approx(1.152)
    assert got.gpu[Capacity.SPOT].source == live_prices.CATALOG_SOURCE
    assert "(A3 Core and Ram SKUs)" in got.gpu[Capacity.SPOT].basis
    # Both pages were read, in US dollars; Standard asks nothing of Kubernetes Engine's SKUs.
    compute = [query for path, query in StandIn.seen if path == COMPUTE_PATH]
    assert [q.get("pageToken") for q in compute] == [None, ["page-2"]]
    assert all(q.get("currencyCode") == ["USD"] for q in compute)
    assert all(path == COMPUTE_PATH for path, _ in StandIn.seen)
    assert f"{len(PAGE_1) + len(PAGE_2)} SKUs read" in got.note


def test_a3_ultra_host_skus_of_its_own_win_over_the_family_ones(stand_in: str) -> None:
    """With "A3 Ultra Instance Core/Ram" SKUs ($0.05, $0.005) in the catalog they price the
    host: 224 x 0.05 + 2952 x 0.005 + 8 x 9.31174 = 11.2 + 14.76 + 74.49392 = 100.45392."""
    StandIn.extra = [
        sku(f"A3 Ultra Instance Core {AMERICAS}", "CPU", "OnDemand", 0.05, US),
        sku(f"A3 Ultra Instance Ram {AMERICAS}", "RAM", "OnDemand", 0.005, US),
    ]
    got = read("a3u", Mode.STANDARD, Capacity.RESERVATION, stand_in)
    assert got.gpu[Capacity.RESERVATION].usd == pytest.approx(100.45392)
    assert "(A3 Ultra Core and Ram SKUs)" in got.gpu[Capacity.RESERVATION].basis


def test_a4_is_priced_per_gpu_slice_in_every_mode(stand_in: str) -> None:
    """a4-highgpu-8g: 8 slices, host included: on-demand 8 x 16.11 = 128.88; Spot 8 x 4.9542 =
    39.6336 (a Spot SKU that carries the OnDemand usage type); flex-start 8 x 11.277 = 90.216;
    1-year commitment 8 x 10.0 = 80.0. No A4 Core or Ram SKU is needed."""
    got = read("a4", Mode.STANDARD, Capacity.SPOT, stand_in)
    assert got.gpu[Capacity.RESERVATION].usd == pytest.approx(128.88)
    assert got.gpu[Capacity.SPOT].usd == pytest.approx(39.6336)
    assert got.gpu[Capacity.FLEX_START].usd == pytest.approx(90.216)
    assert got.committed[live_prices.COMMIT_1Y].usd == pytest.approx(80.0)
    assert "(GPU slices, host included)" in got.gpu[Capacity.SPOT].basis


def test_autopilot_adds_the_premiums_of_kubernetes_engines_skus(stand_in: str) -> None:
    """a3u Autopilot on a reservation: the GPU node = hardware 90.06992 + the Accelerator premium
    224 x 0.001 + 2952 x 0.0001 + 8 x 0.05 = 0.224 + 0.2952 + 0.4 = 0.9192 -> 90.98912; on Spot
    the Spot premiums are missing their CPU and memory SKUs, so no premium (a lower bound stays).
    The Ray head's c2-standard-16 (16 vCPUs, 64 GiB): 16 x 0.002 + 64 x 0.0002 = 0.0448."""
    got = read("a3u", Mode.AUTOPILOT, Capacity.RESERVATION, stand_in)
    assert any(path == GKE_PATH for path, _ in StandIn.seen)
    assert got.premium[Capacity.RESERVATION].usd == pytest.approx(0.9192)
    assert Capacity.SPOT not in got.premium
    assert got.head_premium is not None and got.head_premium.usd == pytest.approx(0.0448)
    settings = settings_for("a3u", Mode.AUTOPILOT, Capacity.RESERVATION)
    book = price_book(settings, got)
    gpu = book.stack_gpu(settings)
    assert gpu.usd == pytest.approx(90.98912) and not gpu.at_least
    assert book.gpu[Capacity.SPOT].at_least
    # The head's node size is GKE's choice: still a lower bound.
    assert book.autopilot_head is not None and book.autopilot_head.at_least
    assert book.autopilot_head.usd == pytest.approx(0.83523 + 0.0448)


def test_the_catalog_wins_over_the_table_and_the_users_rate_over_both(stand_in: str) -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    got = live_prices.read_catalog(settings, lambda: client_for(stand_in), now=NOW)
    book = price_book(settings, got)
    assert book.stack_gpu(settings).usd == pytest.approx(34.9896)
    text = up_block(settings, book, FACTS)
    assert "Cloud Billing catalog read: " in text and "SKUs read" in text
    assert "$34.99 per node-hour x 2 nodes = $69.98/h (Cloud Billing Catalog API" in text
    assert "reservation at a 1-year commitment $49.70 per node-hour" in text
    own = settings.model_copy(update={"gpu_node_hourly_usd": 20.0})
    book = price_book(own, got)
    assert book.stack_gpu(own).usd == 20.0
    # The other modes keep the catalog's figures for comparison.
    assert book.gpu[Capacity.RESERVATION].usd == pytest.approx(90.06992)


def test_with_the_users_own_rate_the_catalog_is_not_asked(stand_in: str) -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    own = settings.model_copy(update={"gpu_node_hourly_usd": 20.0})
    got = live_prices.read_catalog(own, lambda: client_for(stand_in), now=NOW)
    assert StandIn.seen == [] and got.skus == 0
    assert got.note == "not asked: your verl-gke:gpuNodeHourlyUsd is set"


def test_a_read_is_kept_a_day_in_the_users_cache(stand_in: str, cache_dir: Path) -> None:
    settings = settings_for("a4", Mode.STANDARD, Capacity.SPOT)
    first = read("a4", Mode.STANDARD, Capacity.SPOT, stand_in)
    asked = len(StandIn.seen)
    path = live_prices.cache_path(settings)
    assert path == cache_dir / "verl-gke" / "catalog-us-central1-a4-highgpu-8g-n4-highmem-16.json"
    assert path.is_file()
    later = read("a4", Mode.STANDARD, Capacity.SPOT, stand_in, NOW + timedelta(hours=23))
    assert len(StandIn.seen) == asked  # not asked again
    assert later.gpu[Capacity.SPOT].usd == first.gpu[Capacity.SPOT].usd
    assert later.committed[live_prices.COMMIT_1Y].usd == pytest.approx(80.0)
    assert "kept a day" in later.note
    read("a4", Mode.STANDARD, Capacity.SPOT, stand_in, NOW + timedelta(hours=24))
    assert len(StandIn.seen) > asked  # a day old: read again


def test_a_disabled_api_leaves_the_tables_figures_with_the_reason(
    stand_in: str, cache_dir: Path
) -> None:
    StandIn.disabled = True
    settings = settings_for("a3u", Mode.STANDARD, Capacity.RESERVATION)
    got = live_prices.read_catalog(settings, lambda: client_for(stand_in), now=NOW)
    assert not got.gpu and got.cpu is None
    assert got.note.startswith("Forbidden: 403 GET") and "disabled" in got.note
    assert not live_prices.cache_path(settings).exists()  # a failure is not kept
    book = price_book(settings, got)
    assert book.stack_gpu(settings).usd == A3U_ON_DEMAND
    text = up_block(settings, book, FACTS)
    assert "Cloud Billing catalog not read (Forbidden: 403" in text
    assert "the table's figures are used" in text


def test_no_catalog_answer_at_all_never_raises() -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.FLEX_START)

    def refused() -> Any:
        raise OSError("no route to the API")

    got = live_prices.read_catalog(settings, refused, now=NOW)
    assert got.note == "OSError: no route to the API" and not got.gpu


def test_a4x_has_no_sku_of_its_own_and_keeps_the_tables_answer(stand_in: str) -> None:
    settings = settings_for("a4x", Mode.STANDARD, Capacity.RESERVATION)
    got = live_prices.read_catalog(settings, lambda: client_for(stand_in), now=NOW)
    assert Capacity.RESERVATION not in got.gpu
    assert price_book(settings, got).stack_gpu(settings).usd is None


def test_a_part_matched_by_skus_of_different_prices_is_not_priced() -> None:
    """Two OnDemand H200 SKUs of us-central1 whose descriptions both name the GPU leave no way to
    tell which one the node bills: no catalog figure (the table's stays), never the first listed.
    SkyPilot's catalog shows such pairs exist (pricing/catalog.py node_price)."""
    from google.cloud.billing_v1 import Sku

    def protos(rows: list[dict[str, Any]]) -> list[Any]:
        return [Sku.from_json(json.dumps(row)) for row in rows]

    node = live_prices.Node(("A3 Ultra", "A3"), 224, 2952.0, "H200 141GB GPU", 8)
    host = [row for row in PAGE_1 if row["description"].startswith("A3 Instance")]
    gpu = sku(f"H200 141GB GPU {AMERICAS}", "GPU", "OnDemand", 9.31174, US)
    other = sku("H200 141GB GPU Extended running in Americas", "GPU", "OnDemand", 4.5, US)
    on_demand, region = live_prices.ON_DEMAND, "us-central1"
    priced = live_prices.node_price(protos([*host, gpu]), node, on_demand, region)
    assert priced is not None and priced[0] == pytest.approx(90.06992)
    # The same price listed twice is not ambiguous.
    twice = live_prices.node_price(protos([*host, gpu, gpu]), node, on_demand, region)
    assert twice is not None and twice[0] == pytest.approx(90.06992)
    for rows in ([*host, gpu, other], [*host, other, gpu]):
        assert live_prices.node_price(protos(rows), node, on_demand, region) is None
