"""Evaluation: metrics, the pairwise judge, and the `score` / `compare` commands (`python -m eval`)."""
