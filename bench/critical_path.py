"""Modelled time to the first GRPO step, today and with each start-up lever.

    .venv/bin/python bench/critical_path.py

The program runs under the offline engine (planning/offline_engine.py, imported lazily: importing
this module is cheap); its recorded dependency graph is scheduled with the duration of every link
(planning/startup_links.py: minutes, source, estimate or not; planning/startup_schedule.py: the
schedule). Levers change links, the graph decides what overlaps, so a lever's saving is what it
takes off the longest path.

Prints, per stack/mode:
  - today (no levers) against every lever alone and all levers, minutes saved by each, and how
    many minutes of the critical path rest on estimates;
  - the overlapped figure against (a) every step one after another and (b) the unavoidable chain
    cluster -> GPU nodes -> Ray workers -> the Ray jobs;
  - every link of the critical path, today and with all levers, flagged E (estimate) or P
    (published for a comparable operation), with a numbered source list.
Prints figures; asserts nothing (tests/test_critical_path_model.py checks the model's structure).

For other code: `modelled_minutes(stack, mode, levers)` and `modelled_schedule(...)`, and the
pure model in planning/startup_links.py and planning/startup_schedule.py for a graph already
recorded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.profiles import PROFILES, Capacity, Mode
from planning.startup_links import (
    ALL_LEVERS,
    LEVER_SOURCES,
    NO_LEVERS,
    JobFacts,
    Lever,
    Link,
    job_facts,
    levers_in_graph,
)
from planning.startup_schedule import Schedule, schedule

if TYPE_CHECKING:
    from planning.offline_engine import PlanResult

# Every stack/mode combination the profile table supports.
COMBINATIONS = tuple(
    (profile.name, mode.value) for profile in PROFILES.values() for mode in profile.modes
)
CONFIG = {
    "gcp:project": "acme-ml-prod",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "gpu-res",
    "verl-gke:hfToken": "hf_bench",
}
# Printing order of the levers.
LEVERS = (Lever.FUSE_TUNED, Lever.IMAGE_STREAMING, Lever.PREPULL, Lever.NO_DEFAULT_POOL)


def _config(mode: str, capacity: Capacity) -> dict[str, str]:
    config = {**CONFIG, "verl-gke:mode": mode, "verl-gke:capacity": capacity.value}
    if capacity is not Capacity.RESERVATION:
        del config["verl-gke:reservation"]
    return config


@cache
def recorded(stack: str, mode: str, capacity: Capacity = Capacity.RESERVATION) -> PlanResult:
    """The program's registrations for one stack/mode/capacity (offline, no cloud)."""
    from planning.offline_engine import run_stack

    return run_stack(stack, _config(mode, capacity), strict=True)


@cache
def run_facts(stack: str, mode: str) -> JobFacts:
    """The run's own facts (model, KL terms, validation) from the settings and the GRPO spec
    that the recorded program was built from."""
    from tools.plan import planned_settings
    from training.assembly import training_job

    settings = planned_settings(stack, {**CONFIG, "verl-gke:mode": mode}, strict=True)
    job = training_job(settings)
    return job_facts(settings, job.spec, job.model)


def modelled_schedule(
    stack: str,
    mode: str,
    levers: Iterable[Lever] = NO_LEVERS,
    capacity: Capacity = Capacity.RESERVATION,
) -> Schedule:
    if stack not in PROFILES:
        raise ValueError(f"stack {stack!r}: one of {', '.join(PROFILES)}")
    return schedule(recorded(stack, mode, capacity), run_facts(stack, mode), levers)


def modelled_minutes(stack: str, mode: str, levers: Iterable[Lever] = NO_LEVERS) -> float:
    """Modelled minutes from `pulumi up` to verl's first training step with `levers` on."""
    return modelled_schedule(stack, mode, levers).overlapped


def implemented_levers(stack: str, mode: str) -> frozenset[Lever]:
    """The levers the program, as recorded for this stack/mode, already implements."""
    return levers_in_graph(recorded(stack, mode), PROFILES[stack].arch)


def _lever_cell(today: float, alone: Schedule, lever: Lever) -> str:
    if lever in alone.links.not_applied:
        return "n/a"
    return f"-{today - alone.overlapped:.1f}"


Schedules = dict[tuple[str, str], tuple[Schedule, Schedule]]


def _print_minutes() -> Schedules:
    """The minutes table (today, each lever alone, all levers, the program as recorded)."""
    head = "".join(f"{lever.value:>17}" for lever in LEVERS)
    print(
        f"{'stack':<6}{'mode':<11}{'no levers':>10}{'est.':>6}{head}{'all levers':>12}"
        f"{'saved':>7}{'program':>9}"
    )
    cache_: Schedules = {}
    implemented: dict[tuple[str, str], frozenset[Lever]] = {}
    for stack, mode in COMBINATIONS:
        today = modelled_schedule(stack, mode)
        best = modelled_schedule(stack, mode, ALL_LEVERS)
        cache_[(stack, mode)] = (today, best)
        implemented[(stack, mode)] = implemented_levers(stack, mode)
        program = modelled_minutes(stack, mode, implemented[(stack, mode)])
        cells = "".join(
            f"{_lever_cell(today.overlapped, modelled_schedule(stack, mode, {lv}), lv):>17}"
            for lv in LEVERS
        )
        print(
            f"{stack:<6}{mode:<11}{today.overlapped:>10.1f}{today.estimated_minutes:>6.1f}{cells}"
            f"{best.overlapped:>12.1f}{today.overlapped - best.overlapped:>7.1f}{program:>9.1f}"
        )
    print(
        "\n  no levers = today's honest figure; each lever column = minutes it saves alone;"
        "\n  est. = minutes of that critical path resting on estimates; n/a = does not apply"
        "\n  (reason below); program = the program as recorded, with the levers it implements:"
    )
    for (stack, mode), found in implemented.items():
        names = ", ".join(sorted(lv.value for lv in found)) or "none"
        print(f"    {stack}/{mode}: {names}")
    return cache_


def _print_critical_paths(cache_: Schedules, sources: dict[str, int]) -> None:
    """Every link of each critical path, today and with all levers, numbered into `sources`."""

    def ref(link: Link) -> str:
        number = sources.setdefault(link.source, len(sources) + 1)
        return f"[{number}]"

    print("\nCritical path, link by link (minutes today -> all levers; E estimate, P published):")
    for (stack, mode), (today, best) in cache_.items():
        print(f"  {stack}/{mode}: {today.overlapped:.1f} -> {best.overlapped:.1f}")
        after = {link.key: link for step in best.path for link in step.links}
        for step in today.path:
            for link in step.links:
                new = after.get(link.key)
                if link.minutes == 0 and (new is None or new.minutes == 0):
                    continue
                moved = f"{new.minutes:>5.1f}" if new is not None else "  off"
                lever_ref = ""
                if new is not None and new.lever is not None:
                    lever_ref = f" {new.lever.value} {ref(new)}"
                print(
                    f"    {step.name:<18}{link.title[:48]:<49}{link.minutes:>5.1f} ->{moved}"
                    f"  {'E' if link.estimate else 'P'} {ref(link)}{lever_ref}"
                )
        skipped = {lv: why for lv, why in best.links.not_applied.items()}
        for lever, why in skipped.items():
            print(f"    ({lever.value} not applied: {why})")


def _print_capacities() -> None:
    """The program as recorded on each capacity mode it supports: outside a reservation the GPU
    pool and the RayCluster wait for the rehearsal (config/capacity.py gpus_after_rehearsal)."""
    print("\nBy capacity mode, the program as recorded (minutes to the first step, once capacity")
    print("is granted; outside a reservation the GPU nodes are created after the rehearsal):")
    for stack, mode in COMBINATIONS:
        support = PROFILES[stack].capacity.get(Mode(mode))
        cells = []
        for capacity in support.supported if support is not None else ():
            timed = modelled_schedule(
                stack, mode, implemented_levers(stack, mode), capacity=capacity
            )
            cells.append(f"{capacity.value} {timed.overlapped:.1f}")
        print(f"  {stack}/{mode}: {'; '.join(cells)}")


def _print_recovery(sources: dict[str, int]) -> None:
    """Node loss to training again per capacity mode; GPU-hours of a hang (planning/
    recovery_links.py), for the program as recorded."""
    from config.recovery import DEFAULT_HANG_MINUTES
    from planning import recovery_links
    from planning.startup_links import links, startup_facts

    print("\nNode lost -> training again, minutes (E: minutes resting on estimates):")
    print("GPU-hours of one hang: today (until a person notices) vs with the watchdog:")
    for stack, mode in COMBINATIONS:
        table = links(startup_facts(recorded(stack, mode), run_facts(stack, mode)))
        profile = PROFILES[stack]
        cells = []
        support = profile.capacity.get(Mode(mode))
        for capacity in support.supported if support is not None else ():
            chain = recovery_links.node_loss_chain(capacity, mode, table)
            shown = "never*" if chain.minutes == recovery_links.NEVER else f"{chain.minutes:.0f}"
            cells.append(f"{capacity.value} {shown} (E {chain.estimated_minutes:.0f})")
            for link in chain.links:
                sources.setdefault(link.source, len(sources) + 1)
        gpus = profile.gpus_per_node * profile.default_gpu_nodes
        today, watched = recovery_links.hang_gpu_hours(
            gpus, DEFAULT_HANG_MINUTES, recovery_links.restart_minutes(table)
        )
        print(f"  {stack}/{mode}: {'; '.join(cells)}")
        print(f"    hang on {gpus} GPUs: {today:.0f} GPU-h today, {watched:.0f} GPU-h watched")
    print(f"  Standard flex-start: {recovery_links.PROVREQ_SOURCE}")


def main() -> int:
    print("Modelled minutes to the first GRPO step (links: planning/startup_links.py)\n")
    cache_ = _print_minutes()
    print("\nAgainst the schedules of the same links (today / all levers):")
    print(f"{'stack':<6}{'mode':<11}{'overlapped':>13}{'(a) seq':>15}{'(b) chain':>15}")
    for (stack, mode), (today, best) in cache_.items():
        print(
            f"{stack:<6}{mode:<11}{today.overlapped:>6.1f}/{best.overlapped:<6.1f}"
            f"{today.sequential:>8.1f}/{best.sequential:<6.1f}"
            f"{today.chain:>8.1f}/{best.chain:<6.1f}"
        )
    sources: dict[str, int] = {}
    _print_critical_paths(cache_, sources)
    _print_capacities()
    _print_recovery(sources)
    print("\nLevers:")
    for lever in LEVERS:
        print(f"  {lever.value}: {LEVER_SOURCES[lever]}")
    print("\nSources:")
    for text, number in sources.items():
        print(f"  [{number}] {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
