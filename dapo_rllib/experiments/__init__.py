"""Experiments built on the algorithm through Ray Tune: the DAPO paper's ablation and the comparison of
the registered algorithms (`comparison_grid` is their shared grid, report and plot)."""
