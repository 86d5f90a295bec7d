"""Where the GRPO run is defined and checked: the verl job spec and its rules, the memory-fit
estimate and the assembly of both for a stack. Runs inside the Pulumi program."""
