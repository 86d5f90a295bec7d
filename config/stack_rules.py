"""The rules a stack's settings must pass before any resource exists: names, region and zone,
capacity and reservation, versions, CIDR ranges, images and charts. Each rule returns None or one
message naming the config key, the value it had and a fix that is itself accepted.

config/settings.py runs them from StackSettings' model validator (through `problems`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from datetime import date
from typing import Any

from config import (
    cluster_security,
    evaluation,
    input_rules,
    known_values,
    placement,
    run_inputs,
    verl_source,
)
from config.image_streaming import streaming_refusal
from config.profiles import (
    AUTOPILOT_DRANET_REFUSED_CHANNELS,
    PROFILES,
    AcceleratorProfile,
    Capacity,
    GpuNetworking,
)
from config.stack_values import (
    DEFAULT_MODEL,
    StackValues,
    config_key,
    default_capacity,
    image_fields,
    version_tuple,
)

_GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# REGION-LETTER, or an AI zone REGION-aiN-LETTER (config/known_values.py).
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-(?:ai[0-9]+)?[a-z]$")
# [projects/P/reservations/]NAME[/reservationBlocks/B[/reservationSubBlocks/S]]: the forms GKE's
# `--reservation` takes as the reservation affinity's value (AI Hypercomputer "Create a custom
# AI-optimized GKE cluster which uses A4X": a sub-block places the nodes in one NVL72 domain).
_RESERVATION_PART = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_RESERVATION = re.compile(
    r"^(projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
    rf"(/reservationBlocks/{_RESERVATION_PART}(/reservationSubBlocks/{_RESERVATION_PART})?)?$"
)
_RESERVATION_FORM = "RESERVATION_NAME[/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]]"
_BUCKET = re.compile(r"^[a-z0-9][-a-z0-9_]{1,61}[a-z0-9]$")
_CHART_VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$")
# The first nvidia-dra-driver-gpu chart whose DeviceClasses use resource.k8s.io/v1 when the
# cluster serves it (NVIDIA/k8s-dra-driver-gpu 960b0e10, issue #533); older charts need the
# v1beta1 DRA APIs, which this program does not enable on the cluster.
DRA_DRIVER_MIN_CHART = "25.3.2"
# The DRA driver chart's namespace (manifests/dra_driver.py NAMESPACE; config may not import it).
DRA_DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
_K8S_VERSION = re.compile(r"^1\.(?P<minor>[0-9]+)(\.[0-9]+(-gke\.[0-9]+)?)?$")
# Longest cluster name the tutorial allows; derived names (e.g. "<cluster>-rdma-sub-7") must
# stay within GCE's 63-character limit.
MAX_CLUSTER_NAME = 40
RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")


def problems(
    s: StackValues, accept_gpu_nodes: Callable[[int], bool] | None = None
) -> list[str | None]:
    """Each rule returns None or one message: key = value, why, and the fix."""
    profile = s.profile
    return [
        _check_project(s),
        _check_region(s),
        _check_zone(s),
        _check_mode(s, profile),
        _check_reservation(s, profile),
        _check_placement_policy(s, profile),
        _check_capacity(s, profile),
        _check_gpu_nodes(s, profile, accept_gpu_nodes),
        _check_cluster_name(s),
        _check_namespace(s, profile),
        _check_ksa(s),
        _check_bucket(s),
        _check_cpu_machine(s),
        _check_cpu_nodes(s),
        _check_release_channel(s),
        _check_kubernetes_version(s, profile),
        _check_cidrs(s),
        _check_authorized_networks(s),
        *_input_class_problems(s, profile),
        _check_chart_version(
            s,
            "kuberay_chart_version",
            known_values.KUBERAY_CHART_VERSIONS,
            _kuberay_charts(),
            released_since=known_values.KUBERAY_CHART_VERSIONS_READ,
        ),
        _check_chart_version(
            s,
            "dra_driver_chart_version",
            known_values.DRA_DRIVER_CHART_VERSIONS,
            _dra_charts(profile),
        ),
        _check_dra_driver_chart(s, profile),
        *evaluation.problems(s.evaluation, s.stack),
        *run_inputs.problems(s),
        *verl_source.problems(s),
    ]


def _check_name(
    s: StackValues,
    field_name: str,
    value: str,
    pattern: re.Pattern[str],
    rule: str,
    max_len: int | None = None,
) -> str | None:
    if pattern.match(value) and (max_len is None or len(value) <= max_len):
        return None
    limit = f", at most {max_len} characters" if max_len else ""
    return f"{config_key(field_name)} = {value!r}: must be {rule}{limit}."


def _check_region(s: StackValues) -> str | None:
    # Only a malformed name is refused: the public region table is not every region a project
    # can use (load_settings warns about a region missing from it).
    if _REGION.match(s.region):
        return None
    region = known_values.region_for_fix(s.region, s.zone)
    fix = f"Fix: pulumi config set gcp:region {region} -s {s.stack}"
    if _ZONE.match(s.region):
        if s.zone == s.region:
            # The zone unset (the offline plan then plans with the typed zone) or the same.
            fix += f", then {s.fix('zone', s.region)}"
        return f"gcp:region = {s.region!r}: a zone, not a region. {fix}"
    return f"gcp:region = {s.region!r}: not a region name (e.g. us-central1). {fix}"


def _check_zone(s: StackValues) -> str | None:
    match = _ZONE.match(s.zone)
    region = known_values.region_for_fix(s.region, s.zone)
    if not match:
        return (
            f"{config_key('zone')} = {s.zone!r}: not a zone name (e.g. "
            f"{known_values.zone_in(region)}). Fix: {s.fix('zone', known_values.zone_in(region))} "
            f"(the zone of your GPU reservation)"
        )
    if not _REGION.match(s.region):
        return None  # _check_region names the region to set
    if match["region"] != s.region:
        return (
            f"{config_key('zone')} = {s.zone!r} is not in gcp:region {s.region!r}: the GPU nodes, "
            f"the RoCE network profile and the subnets must share one region. Fix: "
            f"pulumi config set gcp:region {match['region']} -s {s.stack}, or "
            f"{s.fix('zone', known_values.zone_in(s.region, s.zone[-1]))} (the zone of your "
            f"reservation)"
        )
    return None


def _check_mode(s: StackValues, profile: AcceleratorProfile) -> str | None:
    if s.mode in profile.modes:
        return None
    allowed = ", ".join(m.value for m in profile.modes)
    return (
        f"{config_key('mode')} = {s.mode.value!r}: profile {profile.name} supports only {allowed} "
        f"({profile.description}). Fix: {s.fix('mode', profile.default_mode.value)}"
    )


def _check_reservation(s: StackValues, profile: AcceleratorProfile) -> str | None:
    if s.reservation is None:
        support = profile.capacity.get(s.mode)
        if s.capacity is not Capacity.RESERVATION and (
            support is None or s.capacity not in support.supported
        ):
            # _check_capacity (or _check_mode) refuses it, with `reservation` as the way there;
            # a reservation placeholder was set aside only because of that capacity
            # (config/settings.py _drop_unused_reservation_placeholder).
            return None
        if profile.reservation_required:
            return (
                f"{config_key('reservation')} is not set: {profile.name} machines "
                f"({profile.machine_type}) are only available through a reservation. Fix: "
                f"{s.fix('reservation', _RESERVATION_FORM)}"
            )
        return None
    if _RESERVATION.match(s.reservation):
        return None
    # Compute Engine names are lowercase: the name typed in lowercase, without spaces or a
    # URL's prefix, where that is a reservation reference.
    meant = re.sub(r"^https://www\.googleapis\.com/compute/v1/", "", s.reservation.strip())
    meant = re.sub(r"reservationblocks", "reservationBlocks", meant.lower())
    meant = re.sub(r"reservationsubblocks", "reservationSubBlocks", meant).replace("_", "-")
    fix = meant if _RESERVATION.match(meant) else "my-reservation"
    return (
        f"{config_key('reservation')} = {s.reservation!r}: expected NAME, "
        f"NAME/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK] or "
        f"projects/PROJECT/reservations/NAME[/...] (lowercase "
        f"letters, digits, hyphens). Fix: {s.fix('reservation', fix)}"
    )


def _check_placement_policy(s: StackValues, profile: AcceleratorProfile) -> str | None:
    """An existing workload policy instead of the stack's own (config/placement.py)."""
    if s.placement_policy is None:
        return None
    key = config_key("placement_policy")
    drop = f"pulumi config rm {key} -s {s.stack}"
    if profile.placement is None:
        return (
            f"{key} = {s.placement_policy!r}: {profile.name} GPU pools use no workload policy "
            f"(only A4X's 1x72 NVL72 placement does). Fix: {drop}"
        )
    why = placement.policy_problem(s.placement_policy, s.project, s.region)
    if why is None:
        return None
    return (
        f"{key} = {s.placement_policy!r}: {why}. Fix: {drop} (the stack then creates its own "
        f"policy), or create one in {s.region}: gcloud beta compute resource-policies create "
        f"workload-policy NAME --type {profile.placement.type} --accelerator-topology "
        f"{profile.placement.accelerator_topology} --project {s.project} --region {s.region}"
    )


def _check_capacity(s: StackValues, profile: AcceleratorProfile) -> str | None:
    """GKE's support matrix (config/profiles.py) and the reservation that goes with it."""
    key = config_key("capacity")
    support = profile.capacity.get(s.mode)
    if support is not None and s.capacity not in support.supported:
        allowed = ", ".join(c.value for c in support.supported)
        other = next((p for p in PROFILES.values() if s.capacity in _supported_anywhere(p)), None)
        elsewhere = (
            f", or a profile that offers it (e.g. {other.name}: {s.fix('profile', other.name)})"
            if other
            else ""
        )
        return (
            f"{key} = {s.capacity.value!r}: {profile.name} on GKE {s.mode.value} supports only "
            f"{allowed} ({support.refused_reason}). Fix: "
            f"{s.fix('capacity', default_capacity(profile, s.mode.value, s.reservation))}"
            f"{elsewhere}"
        )
    if s.capacity is Capacity.RESERVATION and s.reservation is None:
        if profile.reservation_required:
            return None  # _check_reservation already names the missing reservation
        return (
            f"{key} = 'reservation' but {config_key('reservation')} is not set: there is no "
            f"reservation to draw the GPU nodes from. Fix: "
            f"{s.fix('reservation', 'RESERVATION_NAME')}, or {s.fix('capacity', 'flexStart')}"
        )
    if s.capacity is not Capacity.RESERVATION and s.reservation is not None:
        return (
            f"{key} = {s.capacity.value!r} with {config_key('reservation')} = "
            f"{s.reservation!r}: {s.capacity.value} capacity is taken outside any reservation "
            f"(GKE requires NO_RESERVATION for flex-start and Spot node pools), so the "
            f"reservation would be ignored. Fix: pulumi config rm {config_key('reservation')} "
            f"-s {s.stack}, or {s.fix('capacity', Capacity.RESERVATION.value)}"
        )
    return None


def _supported_anywhere(profile: AcceleratorProfile) -> set[Capacity]:
    return {c for support in profile.capacity.values() for c in support.supported}


def _check_gpu_nodes(
    s: StackValues, profile: AcceleratorProfile, accept: Callable[[int], bool] | None
) -> str | None:
    if 1 <= s.gpu_nodes <= profile.max_gpu_nodes:
        return None
    # The nearest count in range that every other rule (the GRPO job's batch split and memory
    # fit included, through `accept`) takes as well.
    in_range = sorted(range(1, profile.max_gpu_nodes + 1), key=lambda n: abs(n - s.gpu_nodes))
    fix = next((n for n in in_range if accept is None or accept(n)), in_range[0])
    return (
        f"{config_key('gpu_nodes')} = {s.gpu_nodes}: {profile.name} allows 1 to "
        f"{profile.max_gpu_nodes} GPU nodes ({profile.max_gpu_nodes_reason}). Fix: "
        f"{s.fix('gpu_nodes', fix)}"
    )


def _check_cluster_name(s: StackValues) -> str | None:
    problem = _check_name(
        s,
        "cluster_name",
        s.cluster_name,
        _GCE_NAME,
        "lowercase letters, digits and hyphens, starting with a letter",
        MAX_CLUSTER_NAME,
    )
    if not problem:
        return None
    # The name typed in the allowed characters (`My_Cluster` -> `my-cluster`), else the default.
    meant = re.sub(r"[^a-z0-9]+", "-", s.cluster_name.lower()).lstrip("-0123456789")
    meant = meant[:MAX_CLUSTER_NAME].rstrip("-")
    if not (_GCE_NAME.match(meant) and len(meant) <= MAX_CLUSTER_NAME):
        meant = "verl-" + s.profile_name
    return f"{problem} Fix: {s.fix('cluster_name', meant)}"


def _check_namespace(s: StackValues, profile: AcceleratorProfile) -> str | None:
    key, value = config_key("namespace"), s.namespace
    fix = s.fix("namespace", known_values.SUGGESTED_NAMESPACE)
    if not (_DNS_LABEL.match(value) and len(value) <= 63):
        return f"{key} = {value!r}: must be a DNS-1123 label, at most 63 characters. Fix: {fix}"
    # The DRA driver's chart gets its own namespace (manifests/dra_driver.py); KubeRay shares the
    # workload namespace.
    taken = {DRA_DRIVER_NAMESPACE: "the NVIDIA DRA driver"} if profile.multi_node_nvlink else {}
    why = known_values.namespace_problem(value, taken)
    return f"{key} = {value!r}: {why}. Fix: {fix}" if why else None


def _check_ksa(s: StackValues) -> str | None:
    key, value = config_key("ksa_name"), s.ksa_name
    fix = s.fix("ksa_name", known_values.SUGGESTED_KSA)
    if not (_DNS_LABEL.match(value) and len(value) <= 63):
        return f"{key} = {value!r}: must be a DNS-1123 label, at most 63 characters. Fix: {fix}"
    why = known_values.ksa_problem(value)
    return f"{key} = {value!r}: {why}. Fix: {fix}" if why else None


def _bucket_ok(name: str) -> bool:
    return bool(_BUCKET.match(name)) and not known_values.google_like(name)


def _check_bucket(s: StackValues) -> str | None:
    name = s.bucket_name
    if _bucket_ok(name):
        return None
    if name == f"{s.project}-{s.cluster_name}" and _check_cluster_name(s) is not None:
        return None  # the default name of a refused clusterName: its fix mends both
    return (
        f"{config_key('bucket_name')} = {name!r}: GCS bucket names are 3-63 lowercase letters, "
        f"digits, hyphens or underscores, start and end with a letter or digit, and must not "
        f"start with 'goog' or contain 'google' or a close misspelling of it (GCS bucket naming "
        f"rules). Fix: "
        f"{s.fix('bucket_name', _bucket_suggestion(s))}"
    )


def _check_cpu_machine(s: StackValues) -> str | None:
    # A machine type that does not exist fails only when GKE creates the pool.
    problem = input_rules.cpu_machine_problem(s.cpu_machine_type)
    if problem is None:
        return None
    why, suggestion = problem
    return (
        f"{config_key('cpu_machine_type')} = {s.cpu_machine_type!r}: {why}. "
        f"Fix: {s.fix('cpu_machine_type', suggestion)}"
    )


def _check_cpu_nodes(s: StackValues) -> str | None:
    if s.cpu_nodes <= s.cpu_max_nodes:
        return None
    return (
        f"{config_key('cpu_nodes')} = {s.cpu_nodes} is above {config_key('cpu_max_nodes')} = "
        f"{s.cpu_max_nodes}. Fix: {s.fix('cpu_max_nodes', s.cpu_nodes)}"
    )


def _check_release_channel(s: StackValues) -> str | None:
    if s.release_channel in RELEASE_CHANNELS:
        return None
    return (
        f"{config_key('release_channel')} = {s.release_channel!r}: must be one of "
        f"{', '.join(RELEASE_CHANNELS)}. Fix: {s.fix('release_channel', 'REGULAR')}"
    )


def _check_kubernetes_version(s: StackValues, profile: AcceleratorProfile) -> str | None:
    # A floor, not a pin: the release channel picks the cluster's version (a pinned version
    # breaks cluster creation once it leaves the channel); components/gke_cluster.py checks the
    # version GKE returns against this floor before the GPU pool exists.
    floor = profile.kubernetes_floor(s.mode)
    match = _K8S_VERSION.match(s.kubernetes_version)
    too_new = match and known_values.kubernetes_minor_problem(int(match["minor"]))
    if too_new:
        return (
            f"{config_key('kubernetes_version')} = {s.kubernetes_version!r}: {too_new}, so the "
            f"cluster could never meet this floor. Fix: {s.fix('kubernetes_version', floor)}"
        )
    if match and version_tuple(s.kubernetes_version) >= version_tuple(floor):
        return None
    return (
        f"{config_key('kubernetes_version')} = {s.kubernetes_version!r}: the lowest GKE version "
        f"the stack accepts must be {floor} or later for {profile.name} on {s.mode.value} "
        f"(DRA resource.k8s.io/v1 and GKE managed DRANET), written as "
        f"1.MINOR[.PATCH[-gke.N]]; the release channel picks the actual version. "
        f"Fix: {s.fix('kubernetes_version', floor)}"
    )


_CIDR_FIELDS = ("host_subnet_cidr", "pods_cidr", "services_cidr")
# 192.168.0.0/16 is taken by the gVNIC and RoCE subnets (the tutorial's Standard networks).
_RDMA_RANGE = ipaddress.IPv4Network("192.168.0.0/16")


def _check_cidrs(s: StackValues) -> str | None:
    networks: dict[str, ipaddress.IPv4Network] = {}
    for name in _CIDR_FIELDS:
        parsed = input_rules.ipv4_network(getattr(s, name))
        if isinstance(parsed, str):
            default = StackValues.model_fields[name].default
            value = getattr(s, name)
            return f"{config_key(name)} = {value!r}: {parsed}. Fix: {s.fix(name, default)}"
        networks[name] = parsed
    return _cidr_size_problem(s, networks) or _cidr_overlap_problem(s, networks)


def _check_authorized_networks(s: StackValues) -> str | None:
    key = config_key("authorized_networks")
    for cidr in s.authorized_networks:
        problem = cluster_security.cidr_problem(cidr)
        if problem is None:
            continue
        shown = ",".join(s.authorized_networks)
        fixed = cluster_security.corrected_cidrs(s.authorized_networks)
        fix = (
            _authorized_networks_fix(key, s.authorized_networks, fixed, s.stack)
            if fixed
            else f"pulumi config rm {key} -s {s.stack} (the endpoint is then open to the "
            f"internet), or set your machine's IPv4 address as A.B.C.D/32"
        )
        return f"{key} = {shown!r}: {cidr!r} is {problem[0]}. Fix: {fix}"
    return None


def _authorized_networks_fix(key: str, given: list[str], fixed: list[str], stack: str) -> str:
    """The commands that store `fixed` as Pulumi.yaml declares the key, `array<string>`: one
    `--path '[i]'` item per range (a plain `pulumi config set` stores a string, which Pulumi
    refuses for an array before the program runs)."""
    accepted = [cluster_security.cidr_problem(item) for item in given]
    dropped = [i for i, problem in enumerate(accepted) if problem and problem[1] is None]
    if len(fixed) == len(given):
        changed = [(i, item) for i, item in enumerate(fixed) if item != given[i]]
        start = []
    elif dropped and dropped == list(range(len(fixed), len(given))):
        # Only the last items have no accepted form: remove those (the last one first), keep
        # the others at their index (`config rm --path 'KEY[i]'` removes the item: pulumi/pulumi
        # sdk/go/common/resource/config/object.go, object.Delete).
        changed = [(i, item) for i, item in enumerate(fixed) if item != given[i]]
        start = [
            f"pulumi config rm --path '{key}[{i}]' -s {stack} (or give it an IPv4 range)"
            for i in reversed(dropped)
        ]
    else:
        changed = list(enumerate(fixed))
        start = [f"pulumi config rm {key} -s {stack}"]
    items = [f"pulumi config set --path '{key}[{i}]' {item} -s {stack}" for i, item in changed]
    return ", then ".join(start + items)


def _cidr_size_problem(s: StackValues, networks: dict[str, ipaddress.IPv4Network]) -> str | None:
    nodes = s.cpu_max_nodes + s.gpu_nodes
    needs = {
        "pods_cidr": input_rules.pods_prefix_needed(nodes),
        "host_subnet_cidr": input_rules.host_prefix_needed(nodes),
    }
    for name, prefix in needs.items():
        if networks[name].prefixlen <= prefix:
            continue
        others = [n for key, n in networks.items() if key != name] + [_RDMA_RANGE]
        fix = input_rules.free_range(prefix, others)
        return (
            f"{config_key(name)} = {networks[name]}: too small for {nodes} nodes "
            f"({config_key('cpu_max_nodes')} + {config_key('gpu_nodes')}); it needs a /{prefix} "
            f"or larger (GKE: one /24 of pod addresses per node; 4 addresses per subnet are "
            f"reserved). Fix: {s.fix(name, fix)}"
        )
    return None


def _cidr_overlap_problem(s: StackValues, networks: dict[str, ipaddress.IPv4Network]) -> str | None:
    named = [*((config_key(k), n) for k, n in networks.items()), ("the RDMA subnets", _RDMA_RANGE)]
    for i, (first_key, first) in enumerate(named):
        for second_key, second in named[i + 1 :]:
            if not first.overlaps(second):
                continue
            # Blame a range the user set (not at its default), so the fix names the changed key.
            changed = [
                k
                for k in _CIDR_FIELDS
                if config_key(k) in (first_key, second_key)
                and getattr(s, k) != StackValues.model_fields[k].default
            ]
            name = (
                changed[0]
                if changed
                else next(k for k in _CIDR_FIELDS if config_key(k) in (first_key, second_key))
            )
            value = networks[name]
            other_key, other = (
                (second_key, second) if config_key(name) == first_key else (first_key, first)
            )
            taken = [n for k, n in networks.items() if k != name] + [_RDMA_RANGE]
            fix = input_rules.free_range(value.prefixlen, taken)
            return (
                f"{config_key(name)} = {value} overlaps {other_key} = {other}: the host, pod, "
                f"service and RDMA ranges must be disjoint. Fix: {s.fix(name, fix)}"
            )
    return None


def _check_image(s: StackValues, field_name: str, example: str) -> str | None:
    # A tag or digest pins what the nodes pull; an untagged name silently means `:latest`.
    value = getattr(s, field_name)
    why = input_rules.image_problem(value)
    if why is None:
        return None
    return f"{config_key(field_name)} = {value!r}: {why}. Fix: {s.fix(field_name, example)}"


def _check_dra_driver_chart(s: StackValues, profile: AcceleratorProfile) -> str | None:
    # Caught here, not as a failed `helm install` (rolled back) after four GPU nodes exist.
    value = s.dra_driver_chart_version
    if not profile.multi_node_nvlink or not _CHART_VERSION.match(value):
        return None
    release = tuple(int(part) for part in value.lstrip("v").split("-")[0].split("."))
    minimum = tuple(int(part) for part in DRA_DRIVER_MIN_CHART.split("."))
    if release >= minimum:
        return None
    return (
        f"{config_key('dra_driver_chart_version')} = {value!r}: charts before "
        f"{DRA_DRIVER_MIN_CHART} install their DeviceClasses as resource.k8s.io/v1beta1, which "
        f"GKE {profile.min_kubernetes_version} does not serve unless enabled. "
        f"Fix: {s.fix('dra_driver_chart_version', DRA_DRIVER_MIN_CHART)}"
    )


def _dra_charts(profile: AcceleratorProfile) -> tuple[str, ...]:
    """Published DRA driver charts this profile can install (_check_dra_driver_chart)."""
    if not profile.multi_node_nvlink:
        return known_values.DRA_DRIVER_CHART_VERSIONS
    floor = version_tuple(DRA_DRIVER_MIN_CHART)
    return tuple(v for v in known_values.DRA_DRIVER_CHART_VERSIONS if version_tuple(v) >= floor)


def _kuberay_charts() -> tuple[str, ...]:
    """Published KubeRay charts the RayCluster can use: those with spec.upgradeStrategy
    (verl_source.chart_problem), so a nearest-version fix is one that rule accepts too."""
    return tuple(v for v in known_values.KUBERAY_CHART_VERSIONS if verl_source.chart_rolls_pods(v))


def _check_chart_version(
    s: StackValues,
    field_name: str,
    published: tuple[str, ...],
    usable: tuple[str, ...] | None = None,
    released_since: date | None = None,
) -> str | None:
    # A bad chart version would only fail in `helm install`, after the cluster exists.
    value = getattr(s, field_name)
    problem = known_values.chart_version_problem(
        value, published, usable or published, released_since
    )
    if problem is None:
        return None
    return (
        f"{config_key(field_name)} = {value!r}: {problem[0]}. Fix: {s.fix(field_name, problem[1])}"
    )


# --- classes of bad input (config/input_rules.py): one rule for every member of a class ------


def _check_project(s: StackValues) -> str | None:
    if _PROJECT_ID.match(s.project):
        return None
    key = config_key("project")
    if s.project.isdigit():
        return (
            f"{key} = {s.project!r}: this is a project number; {key} is the project ID. Fix: "
            f"gcloud projects describe {s.project} --format='value(projectId)', then "
            f"pulumi config set {key} PROJECT_ID -s {s.stack}"
        )
    return (
        f"{key} = {s.project!r}: a project ID is 6-30 characters: lowercase letters, digits and "
        f"hyphens, starting with a letter and not ending with a hyphen. Fix: "
        f"pulumi config set {key} PROJECT_ID -s {s.stack} (gcloud projects list shows yours)"
    )


def _bucket_suggestion(s: StackValues) -> str:
    """A bucket name that passes _check_bucket: the user's own name as meant (`gs://b/folder` ->
    `b`, `My_Bucket` -> `my_bucket`) when that passes, else one from the project, even where
    gcp:project is itself invalid."""
    meant = s.bucket_name.strip().removeprefix("gs://").split("/", 1)[0].lower()
    if _bucket_ok(meant):
        return meant
    base = re.sub(r"[^a-z0-9_-]+", "-", f"{s.project}-verl".lower()).strip("-_")
    base = base.replace("google", "g").removeprefix("goog")
    candidate = base[:63].strip("-_")
    if _bucket_ok(candidate) and candidate[0].isalnum():
        return candidate
    return f"verl-{s.profile_name}-checkpoints"


def _model_revision_problems(s: StackValues) -> list[str | None]:
    """`model@REV` (the revision is its own setting) and a modelRevision that is no commit."""
    typed_id, at, revision = s.model.partition("@")
    # The id part, corrected as model_problem corrects a bare id (`Qwen3-8B` -> `Qwen/Qwen3-8B`).
    bad_id = input_rules.model_problem(typed_id, DEFAULT_MODEL)
    hub_id = typed_id if bad_id is None else bad_id[1]
    rev_key = config_key("model_revision")
    problems: list[str | None] = []
    if at:
        if input_rules.is_commit(revision.lower()):
            fix = f"{s.fix('model', hub_id)} and {s.fix('model_revision', revision.lower())}"
        else:
            fix = (
                f"{s.fix('model', hub_id)} (its main branch, not pinned); to pin it, set "
                f"{rev_key} to the 40-hex commit shown at https://huggingface.co/{hub_id}/commits/"
                f"{revision or 'main'}"
            )
        id_is = f"the id is {hub_id!r}" if bad_id is None else f"{typed_id!r} {bad_id[0]}"
        problems.append(
            f"{config_key('model')} = {s.model!r}: {id_is}; a revision is set with "
            f"{rev_key}, and only a commit pins one. Fix: {fix}"
        )
    revision = s.model_revision
    if revision is not None and not input_rules.is_commit(revision):
        if input_rules.is_commit(revision.lower()):
            fix = s.fix("model_revision", revision.lower())
        else:
            fix = (
                f"pulumi config rm {rev_key} -s {s.stack} (main, not pinned), or set it to the "
                f"commit shown at https://huggingface.co/{hub_id}/commits/{revision}"
            )
        problems.append(
            f"{rev_key} = {revision!r}: not a commit (40 hex digits); a branch or tag moves, so "
            f"the run could train other weights on its next download. Fix: {fix}"
        )
    return problems


def _input_class_problems(s: StackValues, profile: AcceleratorProfile) -> list[str | None]:
    problems: list[str | None] = [
        _check_image(s, name, getattr(profile, name)) for name in image_fields()
    ]
    problems.append(_reason(s, "ray_version", input_rules.ray_version_problem, profile.ray_version))
    # verl's release tags carry a `v` (v0.6.1, v0.9.0: config/verl_source.py VLLM_FOR_REF); a
    # bare release number names no ref, and the data-prep Job's checkout would fail.
    bare_release = re.fullmatch(r"[0-9]+\.[0-9]+(?:\.[0-9]+)?(?:\.post[0-9]+)?", s.verl_ref)
    verl_ref_fix = f"v{s.verl_ref}" if bare_release else profile.verl_ref
    problems.append(
        _reason(s, "verl_ref", input_rules.git_ref_problem, verl_ref_fix)
        or (
            f"{config_key('verl_ref')} = {s.verl_ref!r}: not one of verl's tags, which begin "
            f"with v. Fix: {s.fix('verl_ref', verl_ref_fix)}"
            if bare_release
            else None
        )
    )
    problems.extend(_model_revision_problems(s))
    model = input_rules.model_problem(s.model, DEFAULT_MODEL)
    if model is not None and "@" not in s.model:
        problems.append(
            f"{config_key('model')} = {s.model!r}: {model[0]}. Fix: {s.fix('model', model[1])}"
        )
    token = input_rules.hf_token_problem(s.hf_token.get_secret_value())
    if token is not None:
        key = config_key("hf_token")
        problems.append(
            f"{key} = <secret>: {token}. Fix: pulumi config set --secret {key} hf_... -s "
            f"{s.stack} (the token from huggingface.co/settings/tokens, pasted without spaces)"
        )
    if s.fabric_min_busbw_gbps is not None:
        problems.append(
            _reason(
                s,
                "fabric_min_busbw_gbps",
                input_rules.busbw_problem,
                profile.fabric_min_busbw_gbps,
                s.fabric_min_busbw_gbps,
            )
        )
    problems.append(_check_dranet_channel(s))
    problems.append(_check_image_streaming(s))
    problems.append(_check_installer_arch(s, profile))
    return problems


def _check_installer_arch(s: StackValues, profile: AcceleratorProfile) -> str | None:
    why = known_values.image_arch_problem(s.nccl_installer_image, profile.arch)
    if why is None:
        return None
    return (
        f"{config_key('nccl_installer_image')} = {s.nccl_installer_image!r}: {why}. "
        f"Fix: {s.fix('nccl_installer_image', profile.nccl_installer_image)}"
    )


def _reason(
    s: StackValues, field_name: str, rule: Any, fix_value: object, value: object = None
) -> str | None:
    value = getattr(s, field_name) if value is None else value
    why = rule(value)
    if why is None:
        return None
    return f"{config_key(field_name)} = {value!r}: {why}. Fix: {s.fix(field_name, fix_value)}"


def _check_image_streaming(s: StackValues) -> str | None:
    why = streaming_refusal(s.profile, s.verl_image)
    if not s.image_streaming or why is None:
        return None
    return (
        f"{config_key('image_streaming')} = true: {why}, so this stack cannot stream the "
        f"worker image; with streaming off a DaemonSet pre-pulls it on every GPU node of a "
        f"Standard cluster as soon as the node registers. Fix: "
        f"{s.fix('image_streaming', 'false')} (or remove the key)"
    )


def _check_dranet_channel(s: StackValues) -> str | None:
    if s.profile.networking.get(s.mode) is not GpuNetworking.DRANET_COMPUTE_CLASS:
        return None
    why = AUTOPILOT_DRANET_REFUSED_CHANNELS.get(s.release_channel)
    if why is None:
        return None
    floor = s.profile.kubernetes_floor(s.mode)
    return (
        f"{config_key('release_channel')} = {s.release_channel!r}: Autopilot DRANET needs GKE "
        f"{floor} or later, which this channel does not give a new cluster ({why}). "
        f"Fix: {s.fix('release_channel', 'RAPID')}"
    )
