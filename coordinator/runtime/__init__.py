"""What runs while a coordinator runs: the :class:`~coordinator.runtime.api.Parsley` handle, the
supervisor of the worker processes, the coordinators' membership and their peers."""
