"""The control plane: the status model, the control socket and its CURVE keys, the last
status report, the status table and the Prometheus metrics."""
