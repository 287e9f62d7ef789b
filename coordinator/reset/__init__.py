"""Resetting a process to a new causal boundary: the plan (pure, :mod:`coordinator.reset.plan`)
and its execution against Kafka (:mod:`coordinator.reset.execute`)."""
