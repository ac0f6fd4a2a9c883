"""Evals: recorded cases and their scoring vocabulary (cases.py), an eval run with its cases as
child sessions (run.py), registry datasets (datasets.py)."""
