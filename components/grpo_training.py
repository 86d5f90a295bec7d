"""The GRPO training run on the RayCluster: an NCCL fabric check first (unless turned off), then
the GRPO job, both submitted through the Ray Jobs API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.data_preparation import DataPreparation
from components.gke_cluster import GkeCluster
from components.gpu_node_pool import GpuNodePool
from components.model_weights import ModelWeights
from components.ray_cluster import RayCluster
from components.rehearsal import Rehearsal
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from jobs.dashboard_access import kube_proxy_dashboard
from jobs.job_evidence import gke_cluster_input
from jobs.ray_job import JobDeadlines, RayJob, RayJobArgs
from manifests.log_forwarding import driver_log_query, logs_explorer_url
from training.assembly import FABRIC_RESULT_TAG, TrainingJob, fabric_check_run
from training.model_evaluation import RESULT_TAG as EVAL_RESULT_TAG

# The fabric check moves a few GiB per rank; half an hour means something is wrong.
FABRIC_DEADLINES = JobDeadlines(wait_s=1800.0)


@dataclass(frozen=True)
class GrpoTrainingArgs:
    settings: StackSettings
    job: TrainingJob
    cluster: GkeCluster
    namespace: WorkloadNamespace
    ray_cluster: RayCluster
    data_preparation: DataPreparation
    # The model's weights (data prep's second Job).
    model_weights: ModelWeights
    # verl's rehearsal of this job's command: training starts only after it succeeded.
    rehearsal: Rehearsal
    # Standard only. Jobs run on its nodes: `pulumi destroy` must stop them before the pool goes.
    gpu_pool: GpuNodePool | None


class GrpoTraining(pulumi.ComponentResource):
    job: RayJob
    fabric_check: RayJob | None
    # The Logs Explorer link to this run's driver log (Cloud Logging, via the head's sidecar).
    logs_url: pulumi.Output[str]

    def __init__(
        self, name: str, args: GrpoTrainingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because the fabric check and the GRPO job are declared together: the job's
        dependencies and replacement rules refer to the check's."""
        super().__init__("verl-gke:grpo_training:GrpoTraining", name, None, opts)
        s = args.settings
        gke = args.cluster.cluster
        # The dashboard is reached through the API server's service proxy with a short-lived
        # ADC token: no public endpoint, no port-forward process.
        dashboard = kube_proxy_dashboard(
            gke.endpoint,
            gke.master_auth.cluster_ca_certificate,
            args.namespace.name,
            args.ray_cluster.head_service,
        )

        self.fabric_check = None
        on_cluster: list[pulumi.Resource] = [args.ray_cluster]
        if args.gpu_pool is not None:
            on_cluster.append(args.gpu_pool)
        grpo_waits_for = [*on_cluster, args.data_preparation, args.model_weights, args.rehearsal]
        if s.fabric_check:
            run = fabric_check_run(s)
            # wait_for "finished": GRPO is only submitted once the fabric passed (GPUs are
            # exclusive, and a failed check fails `pulumi up` with its verdict and log tail).
            self.fabric_check = RayJob(
                f"{name}-fabric-check",
                RayJobArgs(
                    entrypoint=run.entrypoint,
                    runtime_env=run.runtime_env,
                    dashboard=dashboard,
                    checkpoint_root=None,
                    submission_id_prefix=f"{s.stack}-fabric",
                    wait_for="finished",
                    deadlines=FABRIC_DEADLINES,
                    result_tag=FABRIC_RESULT_TAG,
                ),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=on_cluster,
                    # The check gates training on this Ray cluster's hardware: it runs once per
                    # RayCluster. Re-running it for a changed script or threshold while GRPO
                    # holds the GPUs would only wait for them; a new RayCluster re-runs it.
                    ignore_changes=["entrypoint", "runtime_env"],
                    replace_with=[args.ray_cluster.cluster],
                ),
            )
            grpo_waits_for.append(self.fabric_check)

        self.job = RayJob(
            f"{name}-job",
            RayJobArgs(
                entrypoint=args.job.entrypoint,
                runtime_env=args.job.runtime_env,
                dashboard=dashboard,
                checkpoint_root=args.job.checkpoint_url,
                submission_id_prefix=f"{s.stack}-grpo",
                # verl-gke:jobWait (config/job_wait.py); the fabric check keeps its own wait.
                wait_for=s.job_wait.provider_mode,
                # Lets refresh and destroy tell a gone cluster from an unreachable dashboard.
                gke_cluster=gke_cluster_input(s.project, gke.location, gke.name),
                # The evaluation's summary line (payloads/export/evaluate.py) becomes `result`.
                result_tag=EVAL_RESULT_TAG if args.job.evaluation is not None else None,
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=grpo_waits_for,
                # A new RayCluster has no record of the job: submit it there (verl resumes from
                # its latest checkpoint) instead of reporting a job that died with the old head.
                replace_with=[args.ray_cluster.cluster],
            ),
        )
        self.logs_url = pulumi.Output.all(
            gke.location, gke.name, args.namespace.name, self.job.submission_id
        ).apply(
            lambda values: logs_explorer_url(
                s.project, driver_log_query(s.project, values[0], values[1], values[2], values[3])
            )
        )
        self.register_outputs({"submissionId": self.job.submission_id, "logsUrl": self.logs_url})

    def fabric_result(self, key: str) -> pulumi.Output[Any] | None:
        """One field of the fabric check's JSON verdict (busbw_gbps, transport, ...)."""
        if self.fabric_check is None:
            return None
        return self.fabric_check.result.apply(lambda result: (result or {}).get(key))
