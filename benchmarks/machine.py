"""What a benchmark's JSON records about the machine it ran on."""

from __future__ import annotations

from pathlib import Path


def cpu_flags() -> list[str]:
    """The CPU's AVX2/FMA, AVX-512 and bf16 flags: the figures differ by an order of magnitude between these classes."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma"})
