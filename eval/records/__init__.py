"""Records: the results README.md and docs/ quote, kept as small JSON files (`docs/records/<name>.json`) and
rendered into the docs by code. `curve` reads an `eval curve` run, `compare` one or more `eval compare` reports,
`students` an `eval students` run and `labels` the label-decoding benchmark; `blocks` places each rendered record
in the pages that name it; `cli` is `python -m eval records`."""
