"""The model's weights into the bucket: data prep's second Job (manifests/data_prep.py
`--part weights`), with the data-prep component's ConfigMap, at the commit whose files the
rehearsal checked.

It starts after the rehearsal's verdict where the rehearsal runs on the CPU side: the download
then overlaps the GPU nodes' creation (35 min modelled, planning/startup_links.py, against 8 for
the download), a failed rehearsal ends `pulumi up` without waiting for a download, and on
Autopilot, where a Performance-class pod has a node of its own, the rehearsal's pod is the one
that takes the node the inputs Job's pod left. On A4X the rehearsal runs on a GPU node after the
GPU pool: there it starts after data prep's inputs Job, as the rehearsal does, so the GRPO job
does not wait for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.data_preparation import DataPreparation, DataPreparationArgs, data_prep_job
from manifests import data_prep as manifests


@dataclass(frozen=True)
class ModelWeightsArgs:
    # The data-prep component's arguments: the same pod but its --part.
    data: DataPreparationArgs
    data_preparation: DataPreparation
    # What must succeed first besides data prep's inputs Job (the rehearsal, see above).
    after: Sequence[pulumi.Resource] = ()


class ModelWeights(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(
        self, name: str, args: ModelWeightsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:model_weights:ModelWeights", name, None, opts)
        self.job = data_prep_job(
            name,
            args.data,
            manifests.WEIGHTS,
            [args.data_preparation, *args.after],
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"job": self.job.metadata.name})
