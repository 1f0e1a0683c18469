"""The metrics: each in its module, each an entry of the registry (`registry.py`), and `eval score` (`score.py`)."""
