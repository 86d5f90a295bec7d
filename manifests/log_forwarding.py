"""Ray's logs out of the head pod: a fluent-bit sidecar that tails Ray's log folder and prints
every line as one JSON object on stdout, which GKE's logging agent ships to Cloud Logging.

KubeRay's documented pattern (Ray docs, "Persist KubeRay custom resource logs", and its GKE
variant): the ray container and the sidecar share the emptyDir at /tmp/ray; the sidecar's config
comes from a ConfigMap. The logs then outlive the head pod, a head restart and a replaced
RayCluster; `jobLogsUrl` opens exactly one run's driver log (the driver runs on the head, so the
head's sidecar sees `job-driver-<submission id>.log`; what the TaskRunner and the workers' actors
print reaches that file through Ray's log-to-driver forwarding).

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from config.settings import StackSettings
from manifests.common import (
    Manifest,
    accepted_findings,
    default_namespace_findings,
    equal_requests_and_limits,
    metadata,
)

CONTAINER = "ray-log-forwarder"
CONFIG_MAP = "ray-log-forwarder"
CONFIG_FILE = "fluent-bit.conf"
CONFIG_VOLUME = "ray-log-forwarder-config"
# The tail input's offset database, on an emptyDir of the head pod: it survives a restart of the
# sidecar (not of the pod, whose /tmp/ray emptyDir starts empty too). The root filesystem is
# read-only, so the database needs this volume.
STATE_VOLUME = "ray-log-forwarder-state"
STATE_DIR = "/fluent-bit/state"
OFFSETS_DB = f"{STATE_DIR}/tail.db"
# A few rows per tailed file plus SQLite's WAL.
STATE_SIZE = "16Mi"
# The emptyDir the head's ray container writes /tmp/ray to (manifests/ray_cluster.py).
RAY_LOGS_VOLUME = "ray-logs"
RAY_TMP = "/tmp/ray"
LOG_GLOB = f"{RAY_TMP}/session_latest/logs/*"
# The record key holding the file a line came from (fluent-bit tail `Path_Key`).
FILE_KEY = "filename"
# fluent-bit v5.1.1 (git tag 6315162a8, 2026-08-14; v5.1 is the current stable line per its
# MAINTENANCE.md); the release workflow pushes docker.io/fluent/fluent-bit:<version>, multi-arch
# (arm64 for A4X). Distroless, runs `fluent-bit -c /fluent-bit/etc/fluent-bit.conf`.
IMAGE = "fluent/fluent-bit:5.1.1"
CONFIG_PATH = "/fluent-bit/etc/fluent-bit.conf"
# The Ray docs' sidecar size; tailing a few files at training's log rate needs no more.
RESOURCES = {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "100Mi"}
# Any non-root uid: the sidecar only reads Ray's world-readable log files.
RUN_AS_USER = 65532


def fluent_bit_config() -> str:
    """Tail every file of the current Ray session (job-driver-*.log, worker-*.out/err, raylet,
    gcs_server, dashboard ...) and print JSON lines: {"date", "filename", "log"}.

    fluent-bit v5.1.1 plugins/in_tail: a line longer than Buffer_Max_Size makes tail stop
    following the file unless Skip_Long_Lines is on (tail_file.c, "lines are too long. Skipping
    file."); the Refresh_Interval rescan then finds it again as new. Truncate_Long_Lines ships the
    first Buffer_Max_Size bytes of such a line and drops the rest; Skip_Long_Lines keeps the file
    followed whatever happens. The offset DB (tail.c `db`) records each file's position, so a
    file is read from the head once (Read_from_Head, for files that appear before the sidecar
    has started) and a restarted sidecar resumes where it stopped. Refresh_Interval 5: new
    job-driver files appear while the head runs."""
    return (
        "[SERVICE]\n"
        "    Flush        1\n"
        "    Log_Level    warn\n"
        "\n"
        "[INPUT]\n"
        "    Name                 tail\n"
        f"    Path                 {LOG_GLOB}\n"
        f"    Path_Key             {FILE_KEY}\n"
        "    Tag                  ray\n"
        "    Refresh_Interval     5\n"
        "    Read_from_Head       true\n"
        "    Buffer_Max_Size      1MB\n"
        "    Truncate_Long_Lines  on\n"
        "    Skip_Long_Lines      on\n"
        f"    DB                   {OFFSETS_DB}\n"
        "    DB.locking           true\n"
        "    Mem_Buf_Limit        32MB\n"
        "\n"
        "[OUTPUT]\n"
        "    Name    stdout\n"
        "    Match   *\n"
        "    Format  json_lines\n"
    )


def config_map(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            CONFIG_MAP,
            "ray-log-forwarding",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "data": {CONFIG_FILE: fluent_bit_config()},
    }


def sidecar() -> dict[str, Any]:
    """The head pod's log-forwarding container."""
    return {
        "name": CONTAINER,
        "image": IMAGE,
        "resources": equal_requests_and_limits(RESOURCES),
        "volumeMounts": [
            {"name": RAY_LOGS_VOLUME, "mountPath": RAY_TMP, "readOnly": True},
            {
                "name": CONFIG_VOLUME,
                "mountPath": CONFIG_PATH,
                "subPath": CONFIG_FILE,
                "readOnly": True,
            },
            {"name": STATE_VOLUME, "mountPath": STATE_DIR},
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def volumes() -> list[dict[str, Any]]:
    """The head pod's volumes for the sidecar: its config and its offset database."""
    return [
        {"name": CONFIG_VOLUME, "configMap": {"name": CONFIG_MAP}},
        {"name": STATE_VOLUME, "emptyDir": {"sizeLimit": STATE_SIZE}},
    ]


def driver_log_query(
    project: str, location: str, cluster: str, namespace: str, submission_id: str
) -> str:
    """Cloud Logging query for one run's driver log as the sidecar ships it."""
    return "\n".join(
        [
            'resource.type="k8s_container"',
            f'resource.labels.project_id="{project}"',
            f'resource.labels.location="{location}"',
            f'resource.labels.cluster_name="{cluster}"',
            f'resource.labels.namespace_name="{namespace}"',
            f'resource.labels.container_name="{CONTAINER}"',
            f'jsonPayload.{FILE_KEY}:"job-driver-{submission_id}.log"',
        ]
    )


# The Logs Explorer opens on the last hour unless told otherwise; a run lasts longer. 30 days is
# the _Default log bucket's retention.
LOOKBACK = "P30D"


def logs_explorer_url(project: str, query: str) -> str:
    """The Logs Explorer link that runs `query` in `project` over the last 30 days (the console's
    /logs/query;query=<percent-encoded>;duration=<ISO 8601> form)."""
    return (
        "https://console.cloud.google.com/logs/query;"
        f"query={quote(query, safe='')};duration={LOOKBACK}?project={quote(project, safe='')}"
    )
