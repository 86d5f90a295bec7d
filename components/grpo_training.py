"""The GRPO training run: one Ray job on the RayCluster, submitted through the Ray Jobs API."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.data_preparation import DataPreparation
from components.gke_cluster import GkeCluster
from components.ray_cluster import RayCluster
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from jobs.dashboard_access import kube_proxy_dashboard
from jobs.ray_job import RayJob, RayJobArgs
from jobs.training_job import TrainingJob


@dataclass(frozen=True)
class GrpoTrainingArgs:
    settings: StackSettings
    job: TrainingJob
    cluster: GkeCluster
    namespace: WorkloadNamespace
    ray_cluster: RayCluster
    data_preparation: DataPreparation


class GrpoTraining(pulumi.ComponentResource):
    job: RayJob

    def __init__(
        self, name: str, args: GrpoTrainingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:training:GrpoTraining", name, None, opts)
        gke = args.cluster.cluster
        # The dashboard is reached through the API server's service proxy with a short-lived
        # ADC token: no public endpoint, no port-forward process.
        dashboard = kube_proxy_dashboard(
            gke.endpoint,
            gke.master_auth.cluster_ca_certificate,
            args.namespace.name,
            args.ray_cluster.head_service,
        )
        self.job = RayJob(
            f"{name}-job",
            RayJobArgs(
                entrypoint=args.job.entrypoint,
                runtime_env=args.job.runtime_env,
                dashboard=dashboard,
                checkpoint_root=args.job.checkpoint_url,
                submission_id_prefix=f"{args.settings.stack}-grpo",
                wait=args.settings.job_wait,
            ),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[args.ray_cluster, args.data_preparation]
            ),
        )
        self.register_outputs({"submissionId": self.job.submission_id})
