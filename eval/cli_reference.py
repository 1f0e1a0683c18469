"""`python -m eval reference`: write docs/reference/ from the code (`eval/reference.py`), or check it is current.

python -m eval reference write            # rewrite docs/reference/config-files.md and commands.md
python -m eval reference write --check    # change nothing; exit 1 when a page differs from the code
"""

from __future__ import annotations

import argparse

from eval import reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("write",), help="write the reference pages from the code")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is stale")


def run(args: argparse.Namespace) -> int:
    missing = reference.undescribed()
    if missing:
        print(f"no description: {', '.join(missing)}")
        return 1
    if args.check:
        stale = reference.stale_pages()
        print(
            "\n".join(f"{reference.REFERENCE / name} differs from the code" for name in stale)
            or "the reference is current"
        )
        return 1 if stale else 0
    reference.REFERENCE.mkdir(parents=True, exist_ok=True)
    for name, page in reference.PAGES.items():
        (reference.REFERENCE / name).write_text(page(), encoding="utf-8")
        print(f"wrote {reference.REFERENCE / name}")
    return 0
