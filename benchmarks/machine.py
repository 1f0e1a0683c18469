"""What a benchmark's JSON records about the machine it ran on."""

from __future__ import annotations

import platform
from pathlib import Path


def _cpuinfo_field(name: str) -> str:
    """The first `name : value` line of /proc/cpuinfo ('' off Linux). The toolkit's own copy is
    `eval.records.machine_line`; this one stays free of the toolkit for scripts that run without it."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name)), "")


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The CPU's AVX2/FMA, AVX-512 and bf16 flags: the figures differ by an order of magnitude between these classes."""
    flags = set(_cpuinfo_field("flags").split())
    return sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma"})
