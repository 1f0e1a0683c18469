"""Bring your own traces: external reasoning chains (e.g. ESD-CoT) read into a trace run through a mapping."""
