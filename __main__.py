"""verl-gke: GRPO training with verl on Ray on GKE. The composition root: settings -> components
-> exports. Nothing here creates a resource directly."""

import functools
import os

import pulumi

from components.capacity import GpuCapacityRequest, GpuCapacityRequestArgs
from components.data_preparation import DataPreparation, DataPreparationArgs
from components.gke_cluster import GkeCluster, GkeClusterArgs, get_credentials_command
from components.gpu_networking import GpuNetworking, GpuNetworkingArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.grpo_training import GrpoTraining, GrpoTrainingArgs
from components.host_network import HostNetwork, HostNetworkArgs
from components.image_prepull import ImagePrepull, ImagePrepullArgs
from components.image_registry import ImageRegistry, ImageRegistryArgs
from components.kuberay_operator import KubeRayOperator, KubeRayOperatorArgs
from components.location_check import check_gpu_location
from components.model_weights import ModelWeights, ModelWeightsArgs
from components.node_identity import NodeIdentity, NodeIdentityArgs
from components.nvidia_dra_driver import NvidiaDraDriver, NvidiaDraDriverArgs
from components.ray_cluster import RayCluster, RayClusterArgs
from components.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from components.rehearsal import Rehearsal, RehearsalArgs
from components.run_telemetry import RunTelemetry, RunTelemetryArgs
from components.storage import TrainingStorage, TrainingStorageArgs
from components.workload_namespace import WorkloadNamespace, WorkloadNamespaceArgs
from config.bucket_layout import bucket_url
from config.image_tags import moving_images_notice
from config.profiles import Mode
from config.pulumi_cli import require_cli_features, require_engine
from config.settings import OFFLINE_PLAN_ENV, settings_from_pulumi
from jobs.rehearsal_verdict import existing_record
from jobs.secret_scan import redact
from pricing.billing import price_book
from pricing.catalog import read_catalog
from pricing.guard import check_cap
from pricing.whole_run import (
    ESTIMATED,
    RunFacts,
    record_steps,
    spec_job,
    spec_steps,
    stack_outputs,
    tokens_per_step,
    up_block,
)
from training.assembly import training_job
from training.dataset_access import check_stack_access
from training.model_evaluation import OUTPUT_KEYS as EVALUATION_OUTPUTS
from training.model_evaluation import evaluation_outputs, evaluation_report_url, warn_evaluation
from training.run_summary import run_block

# Validate everything before the first resource is registered.
require_engine()
require_cli_features()
# A real `pulumi up` reads verl-gke:model's config.json from the Hub (a gated or missing model is
# refused here); the offline plan (planning/offline_engine.py sets OFFLINE_PLAN_ENV) reads no
# network.
job_for = functools.partial(training_job, hub=OFFLINE_PLAN_ENV not in os.environ)
# The GRPO job's rules judge every gpuNodes fix; no error echoes a secret-looking value.
loaded = settings_from_pulumi(job_check=job_for, redact=redact)
for notice in loaded.notices:
    pulumi.log.warn(notice)
if moving_images := moving_images_notice(loaded.settings):
    pulumi.log.warn(moving_images)
settings = loaded.settings
# The Hub's auth-check of verl-gke:dataset with the stack's token, by `pulumi up` only: a preview
# (and so the offline plan and the tests) asks nothing of the network.
if not pulumi.runtime.is_dry_run():
    check_stack_access(settings, pulumi.log.warn)
    # The Compute API: the region and zone exist and the zone offers the profile's machine type
    # (config/gpu_zones.py); an API that does not answer is a warning, never a refusal.
    check_gpu_location(settings, pulumi.log.warn)
grpo = job_for(settings)  # verl's rules and the memory fit, before any GPU is paid for
pulumi.log.info(run_block(grpo, settings))
# Prices: the user's own rate, else the Cloud Billing catalog (read by `pulumi up` only, never by a
# preview, and not at all when the user's own rate is set; a read is kept a day; any failure
# leaves the table's figures), else pricing/table.py. verl-gke:maxHourlyUsd refuses a plan above
# it in a preview and the offline plan too (pricing/guard.py). A preview (and so the offline
# plan, which prints its own block) logs none.
prices = price_book(settings)
if not pulumi.runtime.is_dry_run():
    prices = price_book(settings, read_catalog(settings))
check_cap(settings, prices)
if not pulumi.runtime.is_dry_run():
    # verl's own count from an earlier rehearsal of this very command, else the estimate.
    counted = record_steps(existing_record(bucket_url(settings.bucket_name, grpo.rehearsal_record)))
    steps, counted_by = counted if counted is not None else (spec_steps(grpo.spec), ESTIMATED)
    tokens = tokens_per_step(spec_job(grpo.spec))
    facts = RunFacts(steps, counted_by, tokens, grpo.model.arch.num_params, grpo.evaluation)
    pulumi.log.info(up_block(settings, prices, facts))
if grpo.memory_warning:
    pulumi.log.warn(grpo.memory_warning)
for note in grpo.notes:
    pulumi.log.warn(note)

host_network = HostNetwork("host", HostNetworkArgs(settings))
rdma_networks = (
    RdmaNetworks("gpu-net", RdmaNetworksArgs(settings)) if settings.networking.rdma_vpcs else None
)
# The service account every node runs as, with only the roles GKE documents for nodes.
node_identity = NodeIdentity("node-identity", NodeIdentityArgs(settings))
# Image streaming: the APIs and the remote repository need no cluster, so they
# are created alongside the network; the cluster waits only for the streaming API.
images = (
    ImageRegistry("images", ImageRegistryArgs(settings, node_identity.member))
    if settings.image_pull.streaming
    else None
)
gke = GkeCluster("gke", GkeClusterArgs(settings, host_network, node_identity, images))

# Kubernetes layer: everything here needs the cluster and its CPU pool, never the GPU pool. On a
# reservation it is built while the GPU nodes are being created; where GPU nodes bill from their
# creation (flex-start, Spot) the GPU pool and the RayCluster wait for the rehearsal below.
namespace = WorkloadNamespace("workload", WorkloadNamespaceArgs(settings, gke))
kuberay = KubeRayOperator("kuberay", KubeRayOperatorArgs(settings, gke, namespace))
storage = TrainingStorage("storage", TrainingStorageArgs(settings, gke, namespace))
data_prep_args = DataPreparationArgs(
    settings, gke, namespace, storage, grpo.spec, image_registry=images
)
data_prep = DataPreparation("data-prep", data_prep_args)
# verl's own code on the job's exact command, in the training image, after data prep's inputs.
rehearsal = Rehearsal(
    "rehearsal",
    RehearsalArgs(settings, gke, namespace, storage, data_prep, grpo, image_registry=images),
)
# The weights, after the rehearsal's verdict unless the rehearsal runs on a GPU node (A4X):
# components/model_weights.py says why.
weights_after = () if settings.profile.ray_head_on_gpu_nodes else (rehearsal,)
model_weights = ModelWeights(
    "model-weights", ModelWeightsArgs(data_prep_args, data_prep, after=weights_after)
)
gpus_after = (rehearsal,) if settings.capacity_plan.gpus_after_rehearsal else ()
gpu_pool = (
    GpuNodePool("gpu", GpuNodePoolArgs(settings, gke, rdma_networks, after=gpus_after))
    if settings.mode is Mode.STANDARD
    else None
)
# Without streaming (Standard): pulls the worker image on each GPU node as it registers.
prepull = (
    ImagePrepull("image-prepull", ImagePrepullArgs(settings, gke))
    if settings.image_pull.prepull
    else None
)
capacity_request = (
    GpuCapacityRequest("gpu-capacity", GpuCapacityRequestArgs(settings, gke, namespace, gpu_pool))
    if gpu_pool is not None and settings.capacity_plan.queued_provisioning
    else None
)
gpu_networking = GpuNetworking(
    "gpu-networking", GpuNetworkingArgs(settings, gke, namespace, rdma_networks)
)
dra_driver = (
    NvidiaDraDriver("dra", NvidiaDraDriverArgs(settings, gke, namespace))
    if settings.profile.multi_node_nvlink
    else None
)
telemetry = RunTelemetry("run-telemetry", RunTelemetryArgs(settings, gke, namespace))
ray_cluster = RayCluster(
    "ray",
    RayClusterArgs(
        settings,
        gke,
        namespace,
        kuberay,
        storage,
        gpu_networking,
        dra_driver,
        rdma_networks,
        telemetry,
        image_registry=images,
        prepull=prepull,
        after=gpus_after,
    ),
)
training = GrpoTraining(
    "grpo",
    GrpoTrainingArgs(
        settings, grpo, gke, namespace, ray_cluster, data_prep, model_weights, rehearsal, gpu_pool
    ),
)

pulumi.export("profile", settings.profile_name)
pulumi.export("mode", settings.mode.value)
pulumi.export("clusterName", gke.cluster.name)
pulumi.export("clusterLocation", gke.cluster.location)
pulumi.export("getCredentialsCommand", get_credentials_command(settings))
pulumi.export("kubeconfig", gke.kubeconfig)
# The API server and its CA in plain (neither is a credential): tools.run reads them.
pulumi.export("clusterEndpoint", gke.cluster.endpoint)
pulumi.export("clusterCaCertificate", gke.cluster.master_auth.cluster_ca_certificate)
pulumi.export("bucketName", storage.bucket.name)
pulumi.export("bucketUrl", storage.bucket_url)
for output, value in stack_outputs(settings, prices).items():
    pulumi.export(output, value)  # priced by `python -m tools.run`
pulumi.export("namespace", namespace.name)
pulumi.export("rayClusterName", ray_cluster.name)
pulumi.export("rayHeadService", ray_cluster.head_service)
pulumi.export("dashboardPortForwardCommand", ray_cluster.port_forward_command)
pulumi.export("jobSubmissionId", training.job.submission_id)
pulumi.export("jobStatus", training.job.status)
pulumi.export("jobMessage", training.job.message)
pulumi.export("jobDashboardHint", training.job.dashboard_hint)
pulumi.export("jobLogTail", training.job.log_tail)
# The runner's training attempts and the restarts they used (payloads/export/supervise.py).
pulumi.export("jobAttempts", training.job.attempts)
pulumi.export("jobRestartsUsed", training.job.restarts_used)
pulumi.export("jobLogsUrl", training.logs_url)
pulumi.export("modelExportPath", grpo.model_export_url)
pulumi.export("checkpointRoot", training.job.checkpoint_root)
pulumi.export("checkpoints", training.job.checkpoints)
pulumi.export("latestCheckpoint", training.job.latest_checkpoint)
pulumi.export("latestCheckpointStep", training.job.latest_step)
# The rehearsal's answers, read from its record (jobs/rehearsal_verdict.py): verl's own count of
# the run's steps, the rows its dataset keeps, the reward's sample scores, the image's versions.
pulumi.export("rehearsalRecord", rehearsal.record_url)
pulumi.export("rehearsalSteps", rehearsal.verdict.steps)
pulumi.export("rehearsalSaveSteps", rehearsal.verdict.save_steps)
pulumi.export("rehearsalRows", rehearsal.verdict.rows)
pulumi.export("rehearsalRewardSamples", rehearsal.verdict.reward_samples)
pulumi.export("rehearsalVersions", rehearsal.verdict.versions)
pulumi.export("rehearsalProblems", rehearsal.verdict.problems)
pulumi.export("fabricCheckBusbwGbps", training.fabric_result("busbw_gbps"))
pulumi.export("fabricCheckTransport", training.fabric_result("transport"))
# The export against its base model (payloads/export/evaluate.py): scores, interval, the flag; a
# regressed or failed evaluation is also a warning in this log.
evaluation_url = evaluation_report_url(settings, grpo.evaluation)
evaluation = training.job.result.apply(evaluation_outputs)
for key in EVALUATION_OUTPUTS:
    pulumi.export(key, evaluation.apply(lambda outputs, key=key: outputs[key]))
pulumi.export("evaluationReport", evaluation_url)
training.job.result.apply(lambda result: warn_evaluation(result, evaluation_url))
