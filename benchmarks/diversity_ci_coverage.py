"""How often do the Dist/EAD intervals hold the value they estimate? Corpora drawn from a known population.

A population of paired dialogues: a human reply and a system reply each, their words drawn from Zipf laws
(the system's steeper, so it is the less diverse, as the students are), lengths Poisson. The estimand is a
figure's expected share of the human one on n dialogues, found by averaging `--truth` fresh corpora. Each of
`--corpora` further corpora gets the shipped interval (`human_ratio_intervals`, half-sampling) and the plain
percentile bootstrap's (dialogues drawn with replacement, what the project shipped before), and the JSON counts
how often each holds the estimand, and on which side it misses.

    python benchmarks/diversity_ci_coverage.py --n 253 --corpora 200 --out runs/bench/diversity_ci_coverage.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_flags  # noqa: E402
from eval.metrics.diversity import RATIO_KEYS  # noqa: E402
from eval.metrics.diversity_ci import CorpusGrams, ReplyTokens, human_ratio_intervals  # noqa: E402
from eval.metrics.stats import interval_of_draws  # noqa: E402


@dataclass(frozen=True)
class Population:
    """Where the corpora come from: each side's Zipf exponent and mean reply length, and the vocabulary."""

    human_zipf: float = 1.35
    human_words: float = 13.0
    system_zipf: float = 1.6
    system_words: float = 10.0
    vocab: int = 8000

    def replies(self, n: int, zipf: float, words: float, rng: np.random.Generator) -> list[ReplyTokens]:
        out = []
        for length in rng.poisson(words, n) + 1:
            ids = np.minimum(rng.zipf(zipf, length), self.vocab) - 1
            out.append(ReplyTokens(tuple(f"w{i}" for i in ids), tuple(int(i) for i in ids), self.vocab))
        return out

    def corpus(self, n: int, rng: np.random.Generator) -> tuple[list[ReplyTokens], list[ReplyTokens]]:
        """n dialogues: (system replies, human replies)."""
        return (
            self.replies(n, self.system_zipf, self.system_words, rng),
            self.replies(n, self.human_zipf, self.human_words, rng),
        )


def share(system: Sequence[ReplyTokens], human: Sequence[ReplyTokens], figure: str, draws: np.ndarray) -> np.ndarray:
    return CorpusGrams.of(system, figure).on(draws) / CorpusGrams.of(human, figure).on(draws)


def percentile_bootstrap(system, human, figure: str, resamples: int, seed: int) -> tuple[float, float]:
    draws = np.random.default_rng(seed).integers(0, len(system), size=(resamples, len(system)))
    return interval_of_draws(share(system, human, figure, draws))


def coverage(population: Population, n: int, corpora: int, truth_corpora: int, resamples: int, seed: int) -> dict:
    """Per figure and interval: the share of corpora whose interval holds the estimand, misses per side, width."""
    rng = np.random.default_rng(seed)
    every = np.arange(n)[None, :]
    truth = {f: [] for f in RATIO_KEYS}
    for _ in tqdm(range(truth_corpora), desc="estimand", unit="corpus"):
        system, human = population.corpus(n, rng)
        for figure in RATIO_KEYS:
            truth[figure].append(float(share(system, human, figure, every)[0]))
    estimand = {f: float(np.mean(v)) for f, v in truth.items()}
    methods = ("shipped", "bootstrap")
    tally = {f: {m: {"holds": 0, "above": 0, "below": 0, "width": 0.0} for m in methods} for f in truth}
    for k in tqdm(range(corpora), desc="intervals", unit="corpus"):
        system, human = population.corpus(n, rng)
        shipped = human_ratio_intervals(system, human, RATIO_KEYS, resamples, seed=k)
        for figure in RATIO_KEYS:
            intervals = {
                "shipped": (shipped[figure]["ci_low"], shipped[figure]["ci_high"]),
                "bootstrap": percentile_bootstrap(system, human, figure, resamples, seed=k),
            }
            for method, (low, high) in intervals.items():
                row, value = tally[figure][method], estimand[figure]
                row["holds"] += low <= value <= high
                row["above"] += value < low  # the interval sits above the estimand
                row["below"] += value > high
                row["width"] += (high - low) / corpora
    return {
        figure: {
            "estimand": estimand[figure],
            "sampling_sd": float(np.std(truth[figure], ddof=1)),
            **{method: {**row, "coverage": row["holds"] / corpora} for method, row in methods.items()},
        }
        for figure, methods in tally.items()
    }


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=253, help="dialogues per corpus (the ED test set has 253)")
    parser.add_argument("--corpora", type=int, default=200, help="corpora whose intervals are checked")
    parser.add_argument("--truth", type=int, default=300, help="corpora averaged for the estimand")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    population = Population()
    result = {
        "settings": {**vars(args), "out": str(args.out), "population": asdict(population), "level": 0.95},
        "machine": {"cpu_flags": cpu_flags()},
        "figures": coverage(population, args.n, args.corpora, args.truth, args.resamples, args.seed),
    }
    for figure, row in result["figures"].items():
        print(
            f"{figure}: shipped {row['shipped']['coverage']:.3f} (above {row['shipped']['above']}, below "
            f"{row['shipped']['below']}), bootstrap {row['bootstrap']['coverage']:.3f} (above "
            f"{row['bootstrap']['above']}, below {row['bootstrap']['below']})"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
