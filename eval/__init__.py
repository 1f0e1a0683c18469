"""Evaluation (`python -m eval`), in rooms by job: `metrics/` (each metric, its registry entry, `eval score`),
`compare/` (`eval compare` and its report), `curve/` (`eval curve`); the quickstart and the console on top."""
