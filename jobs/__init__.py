"""The GRPO job's Ray job dynamic provider and the modules it imports. This folder runs in the
dynamic-provider process, which loads jobs.ray_job by the module path pickled into the stack
state: moving it needs an alias (tests/test_state_contract.py pins it)."""
