"""The data-prep Jobs on the CPU nodes: verl source, GSM8K and the model into the bucket.

This component's Job writes what the rehearsal reads (manifests/data_prep.py `--part inputs`:
verl, the reward, the dataset, the model's files but its weights); the weights come with
components/model_weights.py, whose Job shares this component's ConfigMap."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.image_registry import ImageRegistry
from components.storage import TrainingStorage
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from manifests import data_prep as manifests
from training.grpo_preflight import dataset_limits
from training.grpo_spec import GrpoSpec

# Pulumi waits for each Job to complete: a 66 GB model download through GCS FUSE (the weights
# Job), plus image pull and, on a fresh CPU node, node start-up.
JOB_TIMEOUTS = pulumi.CustomTimeouts(create="120m", update="120m")


@dataclass(frozen=True)
class DataPreparationArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace
    storage: TrainingStorage
    # The GRPO job: its prompt limit and train batch decide which datasets the Job refuses.
    spec: GrpoSpec
    # The payload's files by name; read from payloads/data_prep/ when not given.
    scripts: dict[str, str] | None = None
    # The image repository and its reader role, where the pod pulls through it (image streaming).
    image_registry: ImageRegistry | None = None


class DataPreparation(pulumi.ComponentResource):
    # What the rehearsal reads (--part inputs).
    job: k8s.batch.v1.Job

    def __init__(
        self, name: str, args: DataPreparationArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:data_preparation:DataPreparation", name, None, opts)
        s = args.settings
        provider = args.cluster.provider
        scripts = args.scripts if args.scripts is not None else manifests.read_scripts()

        config_map_body = manifests.script_configmap(s, scripts)
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata=config_map_body["metadata"],
            data=config_map_body["data"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[args.namespace]
            ),
        )
        policy = manifests.ingress_policy(s)
        k8s.networking.v1.NetworkPolicy(
            f"{name}-deny-ingress",
            metadata=policy["metadata"],
            spec=policy["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[args.namespace]
            ),
        )

        self.job = data_prep_job(
            name, args, manifests.INPUTS, [config_map], pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({"job": self.job.metadata.name})


def data_prep_job(
    name: str,
    args: DataPreparationArgs,
    part: str,
    after: list[pulumi.Resource],
    opts: pulumi.ResourceOptions,
) -> k8s.batch.v1.Job:
    """The Job of one part of data prep (manifests/data_prep.py), named `<name>-job`."""
    s = args.settings
    scripts = args.scripts if args.scripts is not None else manifests.read_scripts()
    body = manifests.data_prep_job(
        s, dataset_limits(args.spec), scripts, args.cluster.cpu_pool_name, part
    )
    # It mounts the bucket as the KSA (IAM binding, PVC) and reads the HF secret: storage first.
    # The fixed name means a changed Job is deleted before its replacement starts.
    return k8s.batch.v1.Job(
        f"{name}-job",
        metadata=body["metadata"],
        spec=body["spec"],
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                provider=args.cluster.provider,
                depends_on=[
                    args.storage,
                    *(args.image_registry.ready if args.image_registry else []),
                    *after,
                ],
                custom_timeouts=JOB_TIMEOUTS,
                delete_before_replace=True,
            ),
        ),
    )
