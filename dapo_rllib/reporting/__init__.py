"""Reporting: validation metrics (avg@n, pass@k, maj@n), progress lines, tables, plots and TensorBoard
event files."""
