"""The rehearsal Job on the CPU nodes: verl's own code checks the job's exact command in the
training image after data prep, before the GPUs train (manifests/rehearsal.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.data_preparation import DataPreparation
from components.gke_cluster import GkeCluster
from components.image_registry import ImageRegistry
from components.storage import TrainingStorage
from components.workload_namespace import WorkloadNamespace
from config.bucket_layout import bucket_url
from config.rehearsal_scripts import read_scripts
from config.settings import StackSettings
from jobs.rehearsal_verdict import RehearsalVerdict
from manifests import rehearsal as manifests
from training.assembly import TrainingJob
from training.rehearsal_context import rehearsal_context

# Pulumi waits for the Job to complete: the training image's pull on a node that lacks it
# (A4X: a GPU node), verl's imports, the tokenizer over the dataset and the reward's samples;
# minutes, with retries of a failed pod.
# As long as the Job may be active (manifests/rehearsal.py ACTIVE_DEADLINE_S).
_WAIT = f"{manifests.ACTIVE_DEADLINE_S // 60}m"
JOB_TIMEOUTS = pulumi.CustomTimeouts(create=_WAIT, update=_WAIT)


@dataclass(frozen=True)
class RehearsalArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace
    storage: TrainingStorage
    # It reads what data prep's inputs Job wrote (parquet, the model's files but its weights,
    # reward file, the verl checkout), not the weights.
    data_preparation: DataPreparation
    # The GRPO job: its Hydra overrides and the record's path.
    job: TrainingJob
    # The scripts' text by ConfigMap key; read from verl_scripts/ and payloads/ when not given.
    files: dict[str, str] | None = None
    # The image repository and its reader role, where the pod pulls through it (image streaming).
    image_registry: ImageRegistry | None = None


class Rehearsal(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    # The record judged: fails `pulumi up` with its problems, else its answers as outputs.
    verdict: RehearsalVerdict
    record_url: str

    def __init__(
        self, name: str, args: RehearsalArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because the ConfigMap, the policy, the Job and its verdict are declared together:
        each names the one before it."""
        super().__init__("verl-gke:rehearsal:Rehearsal", name, None, opts)
        s = args.settings
        provider = args.cluster.provider
        files = args.files if args.files is not None else read_scripts()
        config_map_body = manifests.script_configmap(s, files)
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
        body = manifests.rehearsal_job(
            s,
            args.job.rehearsal_record,
            args.job.hydra_overrides,
            files,
            args.cluster.cpu_pool_name,
            # Problems and fixes name the stack's settings, as in the offline plan.
            context=rehearsal_context(args.job.spec, s.model),
        )
        # After data prep's inputs Job (parquet, the model's files, reward file, checkout), not
        # its weights Job: the rehearsal loads the tokenizer and config only. The fixed name
        # means a changed command deletes the old Job before its replacement runs.
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=body["metadata"],
            spec=body["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                depends_on=[
                    config_map,
                    args.storage,
                    args.data_preparation.job,
                    *(args.image_registry.ready if args.image_registry else []),
                ],
                custom_timeouts=JOB_TIMEOUTS,
                delete_before_replace=True,
            ),
        )
        self.record_url = bucket_url(s.bucket_name, args.job.rehearsal_record)
        logs = f"kubectl logs -n {s.namespace} -l job-name={manifests.JOB_NAME} --tail=-1"
        self.verdict = RehearsalVerdict(
            f"{name}-verdict",
            record_url=self.record_url,
            # A new Job (a changed command, image or script) is a new rehearsal: read again.
            job_uid=self.job.metadata.uid,
            logs_hint=logs,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.job]),
        )
        self.register_outputs({"job": self.job.metadata.name, "record": self.record_url})
