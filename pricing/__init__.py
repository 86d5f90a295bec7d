"""Prices and how Google bills them: the one owner of every dollar figure the program, the
offline plan and `python -m tools.run` show.

- table: the list prices, each with its source, the date it was read and how it applies;
- catalog: the Cloud Billing Catalog read of `pulumi up` (cached for a day);
- billing: how each GKE mode and capacity mode bills a run, from start-up to the GPUs' release;
- guard: verl-gke:maxHourlyUsd, the refusal of a plan above the user's cap;
- spend: what a run has cost so far, from the GPU nodes' own lifetimes.
"""
