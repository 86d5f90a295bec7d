"""What the job provider says: progress lines, failure reports with the driver log's tail, and
the hints (how to reach the dashboard, how to stop a job, where to look when it seems stuck)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobs import dashboard_access, job_evidence, job_logs, user_stop
from jobs.dashboard_client import Dashboard, DashboardUnreachableError
from jobs.job_inputs import JobInputs, redact

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails

MESSAGE_MAX_CHARS = 1000


MODE_POINT = {
    "running": "the job is RUNNING",
    "first_step": "verl logs its first training step",
    "finished": "the job has finished",
}


def capped_tail(dashboard: Dashboard, sid: str, info: JobDetails) -> str:
    """The driver log's last lines, capped; a note when it cannot be read."""
    try:
        lines = dashboard.log_tail(
            sid, getattr(info, "driver_node_id", None), patience_s=dashboard.reach_s
        )
    except Exception as exc:  # the report must not hide the job's own failure
        return f"(driver log not readable: {redact(str(exc))[:500]})"
    return redact("\n".join(lines))


def failure_report(
    dashboard: Dashboard,
    sid: str,
    info: JobDetails,
    mode: str,
    first_step: Mapping[str, Any] | None = None,
) -> str:
    tail = capped_tail(dashboard, sid, info)
    count = len(tail.splitlines())
    when = (
        f"after verl logged its first training step (step {first_step['step']}), before "
        f"pulumi up returned"
        if first_step is not None
        else f"before {MODE_POINT[mode]}"
    )
    return (
        f"Ray job {sid} {info.status.value}: {short_message(info.message)}\n"
        f"({when}, wait_for={mode})\n"
        f"--- driver log, last {count} lines (at most {job_logs.TAIL_LINES}, each cut at "
        f"{job_logs.TAIL_LINE_MAX_CHARS} characters) ---\n{tail}"
    )


def log_tail_output(
    dashboard: Dashboard, sid: str, info: JobDetails, props: Mapping[str, Any]
) -> str | None:
    """The `log_tail` output: the capped tail of a FAILED or STOPPED job, read once."""
    status = info.status.value
    if status not in ("FAILED", "STOPPED"):
        return None
    if props.get("status") == status and props.get("log_tail"):
        return str(props["log_tail"])  # a terminal job's log does not change
    return capped_tail(dashboard, sid, info)


def short_message(message: str | None) -> str:
    """Ray's status message without the log excerpt it appends on failure (we add our own)."""
    text = (message or "").split(", last available logs", 1)[0]
    text = text.split("last available logs", 1)[0].strip()
    return redact(text[:MESSAGE_MAX_CHARS])


def not_known(dashboard: Dashboard, props: Mapping[str, Any]) -> str:
    """Why a 404 from the Ray head proves the job gone, in words."""
    ran_under = (props.get("last_seen") or {}).get("head_session")
    if ran_under and dashboard.session and ran_under != dashboard.session:
        return (
            f"a new Ray head answers at {dashboard.address} (session {dashboard.session}; the "
            f"job ran under {ran_under}) and does not know the job: the head that ran it is gone"
        )
    return f"the Ray head at {dashboard.address} does not know this job (404)"


def reach_hint(job: JobInputs) -> str:
    spec = job.dashboard
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        return (
            f"is the head pod running (`kubectl get pods -n {spec.namespace} -l "
            f"ray.io/node-type=head`)? does the dashboard answer through the API server "
            f"(`kubectl get --raw /api/v1/namespaces/{spec.namespace}/services/"
            f"{spec.service}:{spec.port_name}/proxy/api/version`)?"
        )
    return f"is the Ray head behind {spec.url} running and reachable from this machine?"


def stop_command(spec: dashboard_access.DashboardSpec, sid: str) -> str:
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        return (
            f"`kubectl port-forward -n {spec.namespace} service/{spec.service} "
            f"8265:{spec.port_name}` and `ray job stop {sid} --address http://127.0.0.1:8265`"
        )
    return f"`ray job stop {sid} --address {spec.url}`"


def stuck_hint(job: JobInputs, sid: str, status: str) -> str:
    spec = job.dashboard
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        pods = f"`kubectl get pods -n {spec.namespace}` (Pending or ContainerCreating: nodes or "
        pods += "image pulls; `kubectl describe pod` says which)"
        if status == "PENDING":
            return f"{pods}; the job's status message in the Ray dashboard"
        return f"the driver log (`ray job logs`, see dashboard_hint); {pods}"
    if status == "PENDING":
        return f"the Ray dashboard at {spec.url} (resources, runtime env)"
    return f"the driver log: `ray job logs {sid} --address {spec.url}`"


def no_evidence_message(
    job: JobInputs, sid: str, exc: DashboardUnreachableError, evidence: job_evidence.Evidence
) -> str:
    return redact(
        f"Ray job {sid} may still be running: {exc.short()}, and nothing proved the job gone "
        f"({evidence.summary()}). It stays in the state and nothing replaces it: a new job next "
        "to a running one would compete for the same GPUs.\n"
        "What you can do:\n"
        f"- make the dashboard reachable and run the command again: {reach_hint(job)}\n"
        f"- or stop the job yourself ({stop_command(job.dashboard, sid)}) and run the command "
        "again;\n"
        "- or, if you know the cluster and the job are gone: `pulumi refresh` drops the job once "
        "the Kubernetes or GKE API confirms it; otherwise remove it from the state with "
        "`pulumi state delete '<URN of this RayJob>'` (`pulumi stack --show-urns` lists the "
        "URNs) and run the command again."
    )


def next_attempt(sid: str) -> str:
    match = re.fullmatch(r"(.+)-r(\d+)", sid)
    return f"{match.group(1)}-r{int(match.group(2)) + 1}" if match else f"{sid}-r2"


def resume_note(root: str | None, latest_checkpoint: str | None) -> str:
    if root is None:
        return "the job keeps no checkpoints: it starts from the beginning"
    if latest_checkpoint:
        return f"the run continues in {root}: verl resumes from {latest_checkpoint}"
    return f"the run starts at step 0 in {root}: no checkpoint there yet"


# A run folder's name, `w<world size>-<hash of the resume identity>` (config/bucket_layout.py).
_RUN_FOLDER = re.compile(r"/w(\d+)-([0-9a-f]{8})$")


def new_run_note(old_root: Any, new_root: Any) -> str | None:
    """What a changed job spec does to the run: None when the checkpoint folder is the same
    (verl resumes there), else why the new job starts a new run in a new folder."""
    if not isinstance(new_root, str) or old_root == new_root:
        return None
    old = _RUN_FOLDER.search(str(old_root or ""))
    new = _RUN_FOLDER.search(new_root)
    if old and new and old[1] != new[1]:
        why = f"world size {old[1]} -> {new[1]}; verl cannot load a checkpoint of another one"
    elif old and new and old[2] != new[2]:
        why = "model, actor strategy, fsdp_size or LoRA changed; verl cannot resume across"
    else:
        why = "another checkpoint folder (experiment name or defaultLocalDir)"
    return f"the new job starts a new run at step 0 in {new_root}, not in {old_root} ({why})"


def resubmit_note(sid: str, status: str, olds: Mapping[str, Any]) -> str:
    root = olds.get("checkpoint_root")
    why = short_message(olds.get("message"))
    return (
        f"the last refresh saw it {status}{f' ({why})' if why else ''}: resubmitting {sid} as "
        f"{next_attempt(sid)}; "
        f"{resume_note(str(root) if root else None, olds.get('latest_checkpoint'))}"
    )


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress(subject: str, text: str) -> None:
    # The engine shows a dynamic provider's stdout lines as info diagnostics.
    print(f"[ray-job {subject}] {text}", flush=True)


def user_stop_note(sid: str, olds: Mapping[str, Any]) -> str:
    root = olds.get("checkpoint_root")
    resume = resume_note(str(root) if root else None, olds.get("latest_checkpoint"))
    return (
        f"stopped by the user (`python -m tools.run stop`, recorded in the Ray head as "
        f"{user_stop.marker_id(sid)}): not resubmitted. To run it again: `python -m tools.run "
        f"resume <stack>`, then `pulumi up --refresh` submits it as {next_attempt(sid)} ({resume})"
    )
