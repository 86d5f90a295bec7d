"""The Kubernetes layer of the real program, per stack and mode, against the tutorial's values
(the seed for A4X): NCCL installer, network mapping, DRANET, DRA driver, KubeRay, storage, data
preparation and the RayCluster."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from components.gpu_node_pool import GPU_POOL_TIMEOUTS
from manifests import data_prep
from planning import offline_engine
from planning.offline_engine import PlanResult, RecordedResource
from tests.program import COMBINATIONS, plan
from tests.support.durations import minutes
from tests.support.schemas import walk
from tools.plan import kubernetes_objects


def pulled(stack: str, image: str) -> str:
    """A Docker Hub image as the pods pull it: on the x86 stacks (image streaming on by default)
    through the stack's Artifact Registry remote repository; A4X pulls from Docker Hub."""
    if stack == "a4x":
        return image
    return f"us-central1-docker.pkg.dev/acme-ml-prod/verl-{stack}-dockerhub/{image}"


STANDARD = [c for c in COMBINATIONS if c[1] == "standard"]
AUTOPILOT = [c for c in COMBINATIONS if c[1] == "autopilot"]
X86_STANDARD = [("a4", "standard"), ("a3u", "standard")]
GPU = {"a4x": "nvidia-gb200", "a4": "nvidia-b200", "a3u": "nvidia-h200-141gb"}
RELEASE = "kubernetes:helm.sh/v3:Release"


def k8s_objects(result: PlanResult, kind: str) -> list[RecordedResource]:
    return [r for r in result.resources if r.inputs.get("kind") == kind]


def k8s_object(result: PlanResult, kind: str, name: str) -> dict[str, Any]:
    found = [r for r in k8s_objects(result, kind) if r.inputs["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[r.name for r in k8s_objects(result, kind)]}"
    return dict(found[0].inputs)


def resource_of(result: PlanResult, kind: str, name: str) -> RecordedResource:
    return next(r for r in k8s_objects(result, kind) if r.inputs["metadata"]["name"] == name)


def pod_spec(result: PlanResult, kind: str, name: str) -> dict[str, Any]:
    return k8s_object(result, kind, name)["spec"]["template"]["spec"]


# --- NCCL gIB installer (container-engine-accelerators gpudirect-rdma) ----------------------------


@pytest.mark.parametrize(("stack", "mode"), STANDARD)
def test_nccl_installer_per_profile(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    daemonset = k8s_object(result, "DaemonSet", "nccl-rdma-installer")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    spec = daemonset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    arch = "arm64" if stack == "a4x" else "amd64"
    assert expressions == [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": [GPU[stack]]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": [arch]},
    ]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    installer = spec["initContainers"][0]
    image = {
        "a4x": "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib-arm64:v1.1.0",
        "a4": "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1",
        "a3u": "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1",
    }[stack]
    # Pinned, never the moving `master` manifest.
    assert installer["image"] == image
    assert installer["securityContext"] == {"privileged": True}
    assert installer["resources"] == {"requests": {"cpu": "150m"}}
    script = installer["args"][0]
    # Upstream's Standard and A4X installers no longer pass --install-nccl.
    assert "/scripts/container_entry.sh install\n" in script
    assert "--install-nccl" not in script
    assert "cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64" in script
    assert "cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib" in script
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    expected = {
        "library-dir-host": "/home/kubernetes/bin/nvidia/lib64",
        "gib": "/home/kubernetes/bin/gib",
    }
    if stack == "a4x":
        expected["nvidia-dir"] = "/home/kubernetes/bin/nvidia"
    assert host_paths == expected
    assert spec["containers"][0]["image"].startswith("gke.gcr.io/pause:3.8@sha256:")


@pytest.mark.parametrize(("stack", "mode"), AUTOPILOT)
def test_autopilot_follows_the_tutorial_without_a_node_installer(stack: str, mode: str) -> None:
    # The tutorial's ComputeClass + DRANET flow has no installer DaemonSet; the workers install
    # the gIB plugin into an emptyDir themselves, and Autopilot rejects privileged pods that no
    # allowlist matches (docs/real-systems.md, "Autopilot and the NCCL installer").
    result = plan(stack, mode)
    assert k8s_objects(result, "DaemonSet") == []
    names = {r.inputs["metadata"]["name"] for r in k8s_objects(result, "Namespace")}
    assert "rdma-system" not in names
    for _, body in kubernetes_objects(result):
        for path, value in walk(body):
            if path.endswith("securityContext") and isinstance(value, dict):
                assert value.get("privileged") is not True, (body["kind"], path)
            assert not path.endswith("hostPath"), (body["kind"], path)
    worker = ray(result)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    setup = worker["initContainers"][0]
    assert "apt-get install -y nccl-gib-plugins" in setup["args"][0]
    assert {"name": "gib", "emptyDir": {}} in worker["volumes"]


def test_nccl_installer_image_override() -> None:
    result = plan("a3u", "standard", **{"verl-gke__ncclInstallerImage": "example.com/gib:v9"})
    spec = pod_spec(result, "DaemonSet", "nccl-rdma-installer")
    assert spec["initContainers"][0]["image"] == "example.com/gib:v9"


# --- network mapping (A4/A3U Standard, network-mapping.yaml) --------------------------------------


@pytest.mark.parametrize(("stack", "mode"), X86_STANDARD)
def test_network_mapping_names_the_vpcs_the_program_creates(stack: str, mode: str) -> None:
    # A custom cluster name renames the VPCs; the mapping must follow (no name drift).
    result = plan(stack, mode, **{"verl-gke__clusterName": "team-x"})
    vpcs = {r.name: r.inputs["name"] for r in result.of_type("gcp:compute/network:Network")}
    subnets = {
        r.name: r.inputs["name"] for r in result.of_type("gcp:compute/subnetwork:Subnetwork")
    }
    param_sets = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in k8s_objects(result, "GKENetworkParamSet")
    }
    expected = {
        "gvnic-1": {
            "vpc": vpcs["gpu-net-gvnic-vpc"],
            "vpcSubnet": subnets["gpu-net-gvnic-subnet"],
            "deviceMode": "NetDevice",
        }
    }
    for index in range(8):
        expected[f"rdma-{index}"] = {
            "vpc": vpcs["gpu-net-rdma-vpc"],
            "vpcSubnet": subnets[f"gpu-net-rdma-subnet-{index}"],
            "deviceMode": "RDMA",
        }
    assert param_sets == expected
    assert expected["rdma-7"]["vpcSubnet"] == "team-x-rdma-sub-7"
    networks = {
        r.inputs["metadata"]["name"]: r.inputs["spec"] for r in k8s_objects(result, "Network")
    }
    assert networks == {
        name: {
            "type": "Device",
            "parametersRef": {
                "group": "networking.gke.io",
                "kind": "GKENetworkParamSet",
                "name": name,
            },
        }
        for name in expected
    }


@pytest.mark.parametrize(("stack", "mode"), [("a4x", "standard"), *AUTOPILOT])
def test_no_network_mapping_where_gke_manages_the_nics(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    assert k8s_objects(result, "GKENetworkParamSet") == []
    assert k8s_objects(result, "Network") == []


# --- DRANET (Autopilot ComputeClass, A4X NIC claims) --------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), AUTOPILOT)
def test_autopilot_compute_class(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    name = f"dranet-{stack}-computeclass"
    compute_class = k8s_object(result, "ComputeClass", name)
    assert compute_class["apiVersion"] == "cloud.google.com/v1"
    assert "namespace" not in compute_class["metadata"]  # cluster-scoped
    machine = {"a4": "a4-highgpu-8g", "a3u": "a3-ultragpu-8g"}[stack]
    assert compute_class["spec"] == {
        "nodePoolAutoCreation": {"enabled": True},
        "nodePoolConfig": {"dra": {"networking": {"enabled": True}}},
        "priorities": [
            {
                "machineType": machine,
                "gpu": {"count": 8, "type": GPU[stack]},
                "acceleratorNetworkProfile": "auto",
                "reservations": {
                    "affinity": "Specific",
                    "specific": [{"name": "gpu-res", "project": "acme-ml-prod"}],
                },
            }
        ],
    }
    claim = k8s_object(result, "ResourceClaimTemplate", "all-mrdma")
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["metadata"]["namespace"] == "default"
    assert claim["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "req-mrdma",
                        "exactly": {"deviceClassName": "mrdma.google.com", "allocationMode": "All"},
                    }
                ]
            }
        }
    }


@pytest.mark.parametrize(
    ("reservation", "expected"),
    [
        (
            "res-a/reservationBlocks/block-1",
            {"name": "res-a", "project": "acme-ml-prod", "reservationBlock": {"name": "block-1"}},
        ),
        ("projects/shared-gpus/reservations/res-b", {"name": "res-b", "project": "shared-gpus"}),
    ],
)
def test_compute_class_reservation_forms(reservation: str, expected: dict[str, Any]) -> None:
    result = plan("a4", "autopilot", **{"verl-gke__reservation": reservation})
    priority = k8s_object(result, "ComputeClass", "dranet-a4-computeclass")["spec"]["priorities"][0]
    assert priority["reservations"] == {"affinity": "Specific", "specific": [expected]}


def test_compute_class_without_reservation() -> None:
    result = plan("a4", "autopilot", unset=("verl-gke:reservation",))
    priority = k8s_object(result, "ComputeClass", "dranet-a4-computeclass")["spec"]["priorities"][0]
    assert "reservations" not in priority


def test_a4x_rdma_nic_claim_template_is_the_seeds() -> None:
    claim = k8s_object(plan("a4x"), "ResourceClaimTemplate", "verl-rdma-nic")
    assert claim["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "nic",
                        "exactly": {
                            "deviceClassName": "mrdma.google.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        }
    }


# --- NVIDIA DRA driver (A4X, seed) --------------------------------------------------------------

SEED_DRA_VALUES = {
    "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
    "resources": {"gpus": {"enabled": False}},
    "kubeletPlugin": {
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "kubernetes.io/arch", "operator": "Exists"},
        ]
    },
}


def contains(actual: Any, expected: Any) -> bool:
    """Every key/value of `expected` is in `actual` (lists compared whole)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and contains(actual[key], value) for key, value in expected.items()
        )
    return actual == expected


# Pods with a system priority class (manifests/dra_driver.py driver_quota, chart v25.12.0): a
# kubelet plugin per GPU node, the controller and its one surge pod during an upgrade; the IMEX
# daemons carry no priority class.
@pytest.mark.parametrize(("nodes", "pods"), [("4", "6"), ("8", "10")])
def test_dra_driver_namespace_quota_release(nodes: str, pods: str) -> None:
    result = plan("a4x", **{"verl-gke__gpuNodes": nodes})
    k8s_object(result, "Namespace", "nvidia-dra-driver-gpu")
    quota = k8s_object(result, "ResourceQuota", "nvidia-dra-driver-gpu-quota")
    assert quota["metadata"]["namespace"] == "nvidia-dra-driver-gpu"
    assert quota["spec"] == {
        "hard": {"pods": pods},
        "scopeSelector": {
            "matchExpressions": [
                {
                    "operator": "In",
                    "scopeName": "PriorityClass",
                    "values": ["system-node-critical", "system-cluster-critical"],
                }
            ]
        },
    }
    release = result.one(RELEASE, "dra-release")
    assert release.inputs["name"] == "nvidia-dra-driver-gpu"
    assert release.inputs["chart"] == "nvidia-dra-driver-gpu"
    # 25.12.0 (docs/real-systems.md, "NVIDIA DRA driver version"), installs resource.k8s.io/v1.
    assert release.inputs["version"] == "25.12.0"
    # Not awaited and not atomic (atomic forces helm's wait): nothing needs the plugin ready.
    assert release.inputs["skipAwait"] is True
    assert not release.inputs.get("atomic")
    assert release.inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert release.inputs["namespace"] == "nvidia-dra-driver-gpu"
    assert result.depends_on(
        release, resource_of(result, "ResourceQuota", quota["metadata"]["name"])
    )
    domain = k8s_object(result, "ComputeDomain", "verl-compute-domain")
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    # numNodes 0 with the default chart (25.12.0): manifests/dra_driver.py, from the CRD's own
    # description at v25.12.0; test_compute_domain_num_nodes_follows_the_driver_release.
    assert domain["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "verl-compute-domain-channel"}},
    }
    assert result.depends_on(resource_of(result, "ComputeDomain", "verl-compute-domain"), release)


@pytest.mark.parametrize(("chart", "num_nodes"), [("25.12.0", 0), ("25.8.0", 0), ("25.3.2", 4)])
def test_compute_domain_num_nodes_follows_the_driver_release(chart: str, num_nodes: int) -> None:
    # NVIDIA/k8s-dra-driver-gpu: IMEXDaemonsWithDNSNames defaults on from 25.8
    # (pkg/featuregates/featuregates.go); with it the CRD (v25.12.0) recommends numNodes 0 and
    # uses it only for the status; before it, numNodes gates workload pods on that many daemons.
    result = plan("a4x", **{"verl-gke__draDriverChartVersion": chart, "verl-gke__gpuNodes": "4"})
    domain = k8s_object(result, "ComputeDomain", "verl-compute-domain")
    assert domain["spec"]["numNodes"] == num_nodes


def test_dra_driver_values_are_the_seeds_plus_gke_node_affinity() -> None:
    values = plan("a4x").one(RELEASE, "dra-release").inputs["values"]
    assert contains(values, SEED_DRA_VALUES)
    # Added (Cluster Toolkit's A4X values): GKE nodes carry no NFD or control-plane labels.
    assert values["controller"] == {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu", "operator": "DoesNotExist"}
                            ]
                        }
                    ]
                }
            }
        }
    }
    plugin_terms = values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert plugin_terms == [
        {
            "matchExpressions": [
                {
                    "key": "cloud.google.com/gke-accelerator",
                    "operator": "In",
                    "values": ["nvidia-gb200"],
                },
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
            ]
        }
    ]
    assert set(values) == {"nvidiaDriverRoot", "resources", "kubeletPlugin", "controller"}


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[0] != "a4x"])
def test_no_dra_driver_or_compute_domain_on_x86(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    assert [r.name for r in result.of_type(RELEASE)] == ["kuberay-release"]
    assert k8s_objects(result, "ComputeDomain") == []


# --- KubeRay operator (seed) --------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_kuberay_operator_release(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    release = result.one(RELEASE, "kuberay-release").inputs
    assert release["name"] == "kuberay-operator"
    assert release["chart"] == "kuberay-operator"
    assert release["version"] == "1.7.0"
    assert release["repositoryOpts"] == {"repo": "https://ray-project.github.io/kuberay-helm/"}
    assert release["namespace"] == "default"
    # The seed's --set values, exactly.
    assert release["values"] == {"singleNamespaceInstall": True, "watchNamespace": ["default"]}
    # Every stack uses Helm, never the GKE Ray add-on.
    cluster = result.one("gcp:container/cluster:Cluster").inputs
    assert "rayOperatorConfigs" not in cluster.get("addonsConfig", {})
    # `default` exists in every cluster: no Namespace object for it.
    assert "default" not in {r.inputs["metadata"]["name"] for r in k8s_objects(result, "Namespace")}


def test_custom_namespace_is_created_and_used_everywhere() -> None:
    result = plan("a4x", **{"verl-gke__namespace": "rl-team"})
    namespace = resource_of(result, "Namespace", "rl-team")
    release = result.one(RELEASE, "kuberay-release")
    assert release.inputs["namespace"] == "rl-team"
    assert release.inputs["values"]["watchNamespace"] == ["rl-team"]
    assert result.depends_on(release, namespace)
    namespaced = [
        r
        for r in result.resources
        if r.type.startswith("kubernetes:") and r.inputs.get("metadata", {}).get("namespace")
    ]
    workload = [r for r in namespaced if r.inputs["metadata"]["namespace"] == "rl-team"]
    assert {r.inputs["kind"] for r in workload} == {
        "ServiceAccount",
        "Secret",
        "PersistentVolumeClaim",
        "ConfigMap",
        "Job",
        "NetworkPolicy",
        "ResourceClaimTemplate",
        "ComputeDomain",
        "RayCluster",
    }
    for resource in workload:
        assert result.depends_on(resource, namespace), resource.name
    assert result.outputs["namespace"] == "rl-team"
    pv = k8s_object(result, "PersistentVolume", "training-bucket-pv")
    assert pv["spec"]["claimRef"] == {"namespace": "rl-team", "name": "training-bucket-pvc"}
    # Outside `default`, checkov has no default-namespace finding to accept.
    for resource in workload:
        annotations = resource.inputs["metadata"].get("annotations", {})
        assert not any("CKV_K8S_21" in value for value in annotations.values()), resource.name


# --- storage (gcsfuse-storage.yaml) ---------------------------------------------------------------

# Every Ray pod: the data mount, the checkpoint mount and verl's node-local copy.
RAY_POD_MOUNTS = [
    {"name": "training-bucket-vol", "mountPath": "/data"},
    {"name": "training-checkpoints-vol", "mountPath": "/checkpoints"},
    {"name": "verl-node-local", "mountPath": "/opt/verl-node-local", "readOnly": True},
]
# The head's: no file-cache volume, so the uncached data claim (rule: tests/test_fuse_mounts.py).
HEAD_POD_VOLUMES = [
    {
        "name": "training-bucket-vol",
        "persistentVolumeClaim": {"claimName": "training-bucket-uncached-pvc"},
    },
    {
        "name": "training-checkpoints-vol",
        "persistentVolumeClaim": {"claimName": "training-checkpoints-pvc"},
    },
    {"name": "verl-node-local", "emptyDir": {}},
]
# GPU workers: the FUSE sidecar's resources ("0" = no limit, Standard only; Autopilot GPU nodes
# cap it at 2 vCPU / 14 GiB).
SIZED_SIDECAR = {
    "standard": {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": "0",
        "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "0",
    },
    "autopilot": {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": "2",
        "gke-gcsfuse/memory-limit": "14Gi",
        "gke-gcsfuse/ephemeral-storage-limit": "10Gi",
    },
}

# The read-mostly data mount: the tutorial's options with metadata cached for
# good; the checkpoint mount (ttl 0) is tested in tests/test_fuse_mounts.py.
MOUNT_OPTIONS = [
    "implicit-dirs",
    "metadata-cache-negative-ttl-secs=0",
    "metadata-cache-ttl-secs=-1",
    "stat-cache-max-size-mb=-1",
    "type-cache-max-size-mb=-1",
    "file-cache:max-size-mb:184320",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    "write-global-max-blocks=1600",
]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_bucket_identity_and_volume(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    bucket_name = f"acme-ml-prod-verl-{stack}"
    bucket = result.one("gcp:storage/bucket:Bucket").inputs
    assert bucket["name"] == bucket_name
    assert bucket["location"] == "us-central1"
    assert bucket["hierarchicalNamespace"] == {"enabled": True}
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["forceDestroy"] is False
    member = result.one("gcp:storage/bucketIAMMember:BucketIAMMember").inputs
    assert member["role"] == "roles/storage.objectUser"
    assert member["bucket"] == bucket_name
    assert member["member"] == (
        f"principal://iam.googleapis.com/projects/{offline_engine.FAKE_PROJECT_NUMBER}/locations/"
        "global/workloadIdentityPools/acme-ml-prod.svc.id.goog/subject/ns/default/sa/verl-ray"
    )
    k8s_object(result, "ServiceAccount", "verl-ray")
    pv = k8s_object(result, "PersistentVolume", "training-bucket-pv")["spec"]
    assert pv["accessModes"] == ["ReadWriteMany"]
    assert pv["capacity"] == {"storage": "768Gi"}
    assert pv["storageClassName"] == "gcsfuse-sc"
    assert pv["mountOptions"] == MOUNT_OPTIONS
    assert pv["csi"] == {
        "driver": "gcsfuse.csi.storage.gke.io",
        # bucket:suffix, one handle per PV (rule: tests/test_fuse_mounts.py).
        "volumeHandle": f"{bucket_name}:data",
        "volumeAttributes": {
            "skipCSIBucketAccessCheck": "true",
        },
    }
    pvc = k8s_object(result, "PersistentVolumeClaim", "training-bucket-pvc")["spec"]
    assert pvc == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "768Gi"}},
        "storageClassName": "gcsfuse-sc",
        "volumeName": "training-bucket-pv",
    }
    # The same mount without the file cache, under its own handle.
    uncached = k8s_object(result, "PersistentVolume", "training-bucket-uncached-pv")["spec"]
    assert uncached["mountOptions"] == [o for o in MOUNT_OPTIONS if not o.startswith("file-cache:")]
    assert uncached["csi"]["volumeHandle"] == f"{bucket_name}:data-uncached"
    assert uncached["claimRef"]["name"] == "training-bucket-uncached-pvc"
    pvc = k8s_object(result, "PersistentVolumeClaim", "training-bucket-uncached-pvc")["spec"]
    assert pvc["volumeName"] == "training-bucket-uncached-pv"
    assert result.outputs["bucketName"] == bucket_name
    assert result.outputs["bucketUrl"] == f"gs://{bucket_name}"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_hf_token_is_a_kubernetes_secret_and_a_pulumi_secret(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    secret = resource_of(result, "Secret", "hf-secret")
    assert secret.inputs["stringData"] == {"hf_token": "hf_test_token_value"}
    assert "stringData" in secret.secret_inputs
    for resource in result.resources:
        for key, value in resource.inputs.items():
            if key not in resource.secret_inputs:
                assert "hf_test_token_value" not in json.dumps(value), (resource.name, key)
    for key, value in result.outputs.items():
        if key not in result.secret_outputs:
            assert "hf_test_token_value" not in json.dumps(value, default=str), key


@pytest.mark.parametrize(("delete", "retained"), [("false", True), ("true", False)])
def test_bucket_kept_on_destroy_unless_told(delete: str, retained: bool) -> None:
    result = plan("a3u", **{"verl-gke__deleteBucketOnDestroy": delete})
    bucket = result.one("gcp:storage/bucket:Bucket")
    assert bucket.retain_on_delete is retained
    assert bucket.inputs["forceDestroy"] is (not retained)


# --- data preparation (the tutorial's + the payloads/data_prep contract) -----------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_data_prep_job(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    job_resource = resource_of(result, "Job", "data-prep-job")
    job = dict(job_resource.inputs)
    assert job["apiVersion"] == "batch/v1"
    assert job["metadata"]["namespace"] == "default"
    assert 1 <= job["spec"]["backoffLimit"] <= 3
    assert int(job_resource.custom_timeouts["create"].rstrip("m")) >= 90
    assert job_resource.delete_before_replace is True
    template = job["spec"]["template"]
    spec = template["spec"]
    sidecar = {"standard": ("2", "4Gi", "20Gi"), "autopilot": ("4", "8Gi", "50Gi")}[mode]
    assert template["metadata"]["annotations"] == {
        "gke-gcsfuse/volumes": "true",
        "gke-gcsfuse/cpu-limit": sidecar[0],
        "gke-gcsfuse/memory-limit": sidecar[1],
        "gke-gcsfuse/ephemeral-storage-limit": sidecar[2],
    }
    assert spec["serviceAccountName"] == "verl-ray"
    if mode == "standard":
        assert spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}
    else:
        assert spec["nodeSelector"] == {"cloud.google.com/compute-class": "Performance"}
    assert "tolerations" not in spec  # never on GPU nodes
    container = spec["containers"][0]
    # x86 even for A4X: it runs on the (x86) CPU nodes.
    assert container["image"] == pulled(stack, "verlai/verl:vllm011.latest")
    ref = {"a4x": "ddbcdb7", "a4": "v0.6.1", "a3u": "v0.6.1"}[stack]
    assert container["command"] == [
        "python3",
        "/scripts/prepare_data.py",
        "--data-root",
        "/data",
        # What the rehearsal reads; the weights come with the model-download Job.
        "--part",
        "inputs",
        "--verl-repo",
        "https://github.com/volcengine/verl.git",
        "--verl-ref",
        ref,
        # One checkout per stack (config/bucket_layout.py verl_checkout).
        "--verl-dir",
        f"verl-src/{stack}",
        "--model",
        "Qwen/Qwen2.5-32B-Instruct",
        "--model-folder",
        "Qwen2.5-32B-Instruct",
        # The job's prompt limit and batch (training/grpo_spec.py): the script counts prompts
        # verl's filter drops. 16 GPUs, rolloutN 8: a train batch is a multiple of 2.
        "--max-prompt-length",
        "512",
        "--train-batch-size",
        "256",
        "--train-batch-step",
        "2",
        "--min-train-batch",
        "64" if stack == "a4x" else "256",
    ]
    assert container["env"] == [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "hf_token"}},
        },
        {"name": "HF_HOME", "value": "/data/.cache/huggingface"},
        {"name": "HF_HUB_DISABLE_XET", "value": "1"},
    ]
    shape = {
        "standard": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi"},
        "autopilot": {"cpu": "8", "memory": "16Gi", "ephemeral-storage": "50Gi"},
    }[mode]
    assert container["resources"] == {"requests": shape, "limits": shape}
    assert {m["mountPath"]: m["name"] for m in container["volumeMounts"]} == {
        "/data": "training-bucket-vol",
        "/scripts": "script",
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    # No file-cache volume, so the uncached data claim (rule: tests/test_fuse_mounts.py).
    assert volumes["training-bucket-vol"]["persistentVolumeClaim"] == {
        "claimName": "training-bucket-uncached-pvc"
    }
    # Hardened where the image allows it (docs/architecture.md, checkov findings).
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    policy = k8s_object(result, "NetworkPolicy", "data-prep-deny-ingress")
    assert policy["spec"] == {
        "podSelector": {"matchLabels": template["metadata"]["labels"]},
        "policyTypes": ["Ingress"],
    }
    config_map_name = volumes["script"]["configMap"]["name"]
    config_map = k8s_object(result, "ConfigMap", config_map_name)
    # Every module of the payload's folder, one flat key each (mounted at /scripts, where they
    # import each other by plain name); not the package marker.
    modules = sorted(data_prep.PAYLOAD_DIR.glob("*.py"))
    assert config_map["data"] == {p.name: p.read_text() for p in modules if p.name != "__init__.py"}
    assert "prepare_data.py" in config_map["data"]
    # The weights Job: the same pod but its name and --part, after the inputs Job.
    weights_resource = resource_of(result, "Job", "model-download-job")
    weights = copy.deepcopy(dict(weights_resource.inputs))
    weights_command = weights["spec"]["template"]["spec"]["containers"][0]["command"]
    at = weights_command.index("--part")
    assert weights_command[at + 1] == "weights"
    weights_command[at + 1] = "inputs"
    weights["metadata"]["name"] = job["metadata"]["name"]
    assert weights == job
    assert result.depends_on(weights_resource, job_resource)
    assert weights_resource.custom_timeouts == job_resource.custom_timeouts


def test_model_setting_drives_download_and_folder() -> None:
    result = plan("a4", "standard", **{"verl-gke__model": "Qwen/Qwen2.5-14B-Instruct"})
    command = pod_spec(result, "Job", "data-prep-job")["containers"][0]["command"]
    at = command.index("--model")
    assert command[at : at + 4] == [
        "--model",
        "Qwen/Qwen2.5-14B-Instruct",
        "--model-folder",
        "Qwen2.5-14B-Instruct",
    ]


def test_changed_script_renames_the_config_map() -> None:
    settings_result = plan("a4", "standard")
    name = pod_spec(settings_result, "Job", "data-prep-job")["volumes"][1]["configMap"]["name"]
    scripts = data_prep.read_scripts()
    assert name == data_prep.script_configmap_name(scripts)
    # A change to any one module is a new name, so the Job gets a new spec and runs again.
    changed = {
        data_prep.script_configmap_name({**scripts, key: text + "\n# changed\n"})
        for key, text in scripts.items()
    }
    assert len(changed) == len(scripts) and name not in changed


def test_missing_script_names_the_file_and_the_fix(tmp_path: Any) -> None:
    with pytest.raises(data_prep.MissingScriptError) as caught:
        data_prep.read_scripts(tmp_path)
    assert f"{tmp_path}/prepare_data.py is missing" in str(caught.value)
    assert "git checkout -- payloads/data_prep)" in str(caught.value)


# --- RayCluster (seed for A4X; ray-cluster-auto-dranet.yaml / ray-cluster-standard.yaml) ----------


def ray(result: PlanResult) -> dict[str, Any]:
    return dict(result.one("kubernetes:ray.io/v1:RayCluster").inputs)


def test_a4x_ray_cluster_is_the_seeds() -> None:
    result = plan("a4x")
    cluster = ray(result)
    assert cluster["metadata"]["name"] == "gb200-ray-cluster"
    assert cluster["spec"]["rayVersion"] == "2.49.0"
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "kubernetes.io/arch", "operator": "Exists", "effect": "NoSchedule"},
    ]
    post_start = {
        "postStart": {
            "exec": {"command": ["/bin/bash", "-c", "pip3 install --quiet TransferQueue==0.1.8"]}
        }
    }
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-cpus": "0"}
    assert head["template"]["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    head_spec = head["template"]["spec"]
    assert head_spec["serviceAccountName"] == "verl-ray"
    assert head_spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-gb200"}
    assert head_spec["tolerations"] == tolerations
    head_container = head_spec["containers"][0]
    assert head_container["name"] == "ray-head"
    assert head_container["image"] == "verlai/verl:vllm023.aarch64.dev1"
    assert head_container["lifecycle"] == post_start
    assert head_container["ports"] == [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    head_resources = {"cpu": "12", "memory": "32Gi", "ephemeral-storage": "20Gi"}
    assert head_container["resources"] == {"limits": head_resources, "requests": head_resources}
    assert head_container["volumeMounts"][:4] == [
        {"mountPath": "/tmp/ray", "name": "ray-logs"},
        *RAY_POD_MOUNTS,
    ]
    # verl's node-local copy, made before Ray starts (tests/test_fuse_mounts.py).
    assert [c["name"] for c in head_spec["initContainers"]] == ["verl-node-local-copy"]
    assert head_spec["volumes"] == [
        {"name": "ray-logs", "emptyDir": {}},
        *HEAD_POD_VOLUMES,
        # The log forwarder's config (tests/test_after_up.py).
        {"name": "ray-log-forwarder-config", "configMap": {"name": "ray-log-forwarder"}},
        {"name": "ray-log-forwarder-state", "emptyDir": {"sizeLimit": "16Mi"}},
    ]

    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (4, 4, 4)
    assert group["groupName"] == "gpu-group"
    assert group["rayStartParams"] == {"num-cpus": "120"}
    assert group["template"]["metadata"]["annotations"] == SIZED_SIDECAR["standard"]
    spec = group["template"]["spec"]
    assert spec["serviceAccountName"] == "verl-ray"
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-gb200"}
    assert spec["affinity"] == {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"ray.io/group": "gpu-group"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    assert spec["tolerations"] == tolerations
    worker = spec["containers"][0]
    assert worker["name"] == "ray-worker"
    assert worker["lifecycle"] == post_start
    assert worker["env"] == [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}]
    shape = {"cpu": "120", "memory": "600Gi", "nvidia.com/gpu": "4", "ephemeral-storage": "500Gi"}
    claims = ["rdma-nic-0", "rdma-nic-1", "rdma-nic-2", "rdma-nic-3", "compute-domain-channel"]
    assert worker["resources"] == {
        "requests": shape,
        "limits": shape,
        "claims": [{"name": c} for c in claims],
    }
    assert {m["mountPath"]: m["name"] for m in worker["volumeMounts"]} == {
        "/usr/local/nvidia": "nvidia",
        "/usr/local/gib": "gib",
        "/dev/shm": "shared-memory",
        "/tmp": "ray-tmp-storage",
        "/data": "training-bucket-vol",
        "/checkpoints": "training-checkpoints-vol",
        "/opt/verl-node-local": "verl-node-local",
    }
    assert spec["resourceClaims"] == [
        {"name": f"rdma-nic-{i}", "resourceClaimTemplateName": "verl-rdma-nic"} for i in range(4)
    ] + [
        {
            "name": "compute-domain-channel",
            "resourceClaimTemplateName": "verl-compute-domain-channel",
        }
    ]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["gib"] == {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}}
    assert volumes["nvidia"] == {
        "name": "nvidia",
        "hostPath": {"path": "/home/kubernetes/bin/nvidia"},
    }
    assert volumes["shared-memory"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "200Gi"}
    assert volumes["ray-tmp-storage"] == {"name": "ray-tmp-storage", "emptyDir": {}}


@pytest.mark.parametrize(("stack", "mode"), X86_STANDARD)
def test_x86_standard_ray_cluster(stack: str, mode: str) -> None:
    cluster = ray(plan(stack, mode))
    assert (
        cluster["metadata"]["name"] == {"a4": "b200-ray-cluster", "a3u": "h200-ray-cluster"}[stack]
    )
    assert cluster["spec"]["rayVersion"] == "2.47.0"
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"dashboard-host": "0.0.0.0"}
    head_spec = head["template"]["spec"]
    # On the CPU pool (the tutorial's default-pool), without GPU tolerations.
    assert head_spec["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-pool"}
    assert "tolerations" not in head_spec
    head_resources = {"cpu": "12", "memory": "32G", "ephemeral-storage": "9Gi"}
    assert head_spec["containers"][0]["resources"]["requests"] == head_resources
    assert head_spec["containers"][0]["image"] == pulled(stack, "verlai/verl:vllm011.latest")
    assert "lifecycle" not in head_spec["containers"][0]

    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    assert group["rayStartParams"] == {"num-cpus": "220"}
    annotations = group["template"]["metadata"]["annotations"]
    assert annotations["gke-gcsfuse/volumes"] == "true"
    assert annotations["networking.gke.io/default-interface"] == "eth0"
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert interfaces == [
        {"interfaceName": "eth0", "network": "default"},
        {"interfaceName": "eth1", "network": "gvnic-1"},
        *({"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)),
    ]
    spec = group["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": GPU[stack]}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert "resourceClaims" not in spec
    # The gIB installer is not awaited: the worker waits for it on its node (tests/test_await.py).
    assert [c["name"] for c in spec["initContainers"]] == [
        "wait-for-nccl-installer",
        "verl-node-local-copy",
    ]
    worker = spec["containers"][0]
    shape = {"cpu": "220", "memory": "2800Gi", "nvidia.com/gpu": "8", "ephemeral-storage": "1000Gi"}
    assert worker["resources"] == {"requests": shape, "limits": shape}
    assert worker["env"] == [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}]
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    # Only what the worker mounts; the tutorial's unused /lib64, /sys, /proc/sys are gone.
    assert host_paths == {"/home/kubernetes/bin/gib", "/home/kubernetes/bin/nvidia"}
    mounted = {m["name"] for m in worker["volumeMounts"]}
    # The file cache volume is the FUSE sidecar's (gke-gcsfuse-cache), not the worker's.
    assert mounted | {"gke-gcsfuse-cache"} == {v["name"] for v in spec["volumes"]}
    shm = next(v for v in spec["volumes"] if v["name"] == "shared-memory")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "250Gi"}


@pytest.mark.parametrize(("stack", "mode"), AUTOPILOT)
def test_autopilot_dranet_ray_cluster(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    cluster = ray(result)
    head_spec = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    # The tutorial's Performance/c2 head, but not on a Spot VM.
    assert head_spec["nodeSelector"] == {
        "cloud.google.com/compute-class": "Performance",
        "cloud.google.com/machine-family": "c2",
    }
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert group["rayStartParams"] == {"num-cpus": "180"}
    assert group["template"]["metadata"]["annotations"] == SIZED_SIDECAR["autopilot"]
    spec = group["template"]["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/compute-class": f"dranet-{stack}-computeclass"
    }
    k8s_object(result, "ComputeClass", f"dranet-{stack}-computeclass")
    assert spec["resourceClaims"] == [
        {"name": "rdma-claim", "resourceClaimTemplateName": "all-mrdma"}
    ]
    worker = spec["containers"][0]
    shape = {"cpu": "180", "memory": "2000Gi", "nvidia.com/gpu": "8", "ephemeral-storage": "1000Gi"}
    assert worker["resources"] == {
        "requests": shape,
        "limits": shape,
        "claims": [{"name": "rdma-claim"}],
    }
    assert worker["env"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64:/usr/local/gib/lib64"}
    ]
    init, verl_copy = spec["initContainers"]
    assert verl_copy["name"] == "verl-node-local-copy"
    assert init["image"] == pulled(stack, "verlai/verl:vllm011.latest")
    assert "apt-get install -y nccl-gib-plugins" in init["args"][0]
    assert "gpudirect-gib-apt main" in init["args"][0]
    assert init["volumeMounts"] == [{"name": "gib", "mountPath": "/usr/local/gib"}]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["gib"] == {"name": "gib", "emptyDir": {}}
    # Autopilot admits no hostPath volumes in user pods.
    assert not any("hostPath" in v for v in spec["volumes"])


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_pulumi_waits_until_the_ray_cluster_is_ready(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    resource = result.one("kubernetes:ray.io/v1:RayCluster")
    annotations = resource.inputs["metadata"]["annotations"]
    # status.state is "ready" in KubeRay 1.7 once all pods are (see crds/ray.io_rayclusters.yaml).
    assert annotations == {"pulumi.com/waitFor": "jsonpath={.status.state}=ready"}
    # Longer than the GPU pool's own create timeout: the cluster waits for its nodes.
    gpu_wait = minutes(GPU_POOL_TIMEOUTS.create or "0m")
    assert int(resource.custom_timeouts["create"].rstrip("m")) > gpu_wait
    assert resource.delete_before_replace is True


def test_gpu_nodes_setting_sizes_the_worker_group() -> None:
    (group,) = ray(plan("a3u", "standard", **{"verl-gke__gpuNodes": "4"}))["spec"][
        "workerGroupSpecs"
    ]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (4, 4, 4)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_ray_outputs(stack: str, mode: str) -> None:
    outputs = plan(stack, mode).outputs
    name = {"a4x": "gb200-ray-cluster", "a4": "b200-ray-cluster", "a3u": "h200-ray-cluster"}[stack]
    assert outputs["rayClusterName"] == name
    assert outputs["rayHeadService"] == f"{name}-head-svc"
    assert outputs["namespace"] == "default"
    assert outputs["dashboardPortForwardCommand"] == (
        f"kubectl port-forward -n default svc/{name}-head-svc 8265:8265"
    )


def test_accepted_checkov_findings_carry_their_reason() -> None:
    result = plan("a4", "standard")
    installer = k8s_object(result, "DaemonSet", "nccl-rdma-installer")
    skips = dict(
        value.split("=", 1)
        for key, value in installer["metadata"]["annotations"].items()
        if key.startswith("checkov.io/skip")
    )
    assert skips["CKV_K8S_16"] == "writes the gIB plugin into the node's /home/kubernetes/bin"
    job = k8s_object(result, "Job", "data-prep-job")
    job_skips = {value.split("=", 1)[0] for value in job["metadata"]["annotations"].values()}
    # Fixed in the manifest, so not accepted: privilege escalation, capabilities, seccomp,
    # service-account token.
    assert not job_skips & {"CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_38"}
    assert "CKV_K8S_21" in job_skips  # the tutorial's `default` namespace
