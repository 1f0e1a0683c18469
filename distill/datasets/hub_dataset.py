"""The role datasets as one Hugging Face dataset repo, one config per role.

`stage` writes exactly what the hub receives into a local folder: `<role>/<split>-00000-of-00001.parquet`
(the layout `DatasetDict.push_to_hub(config_name=role)` uses) and a `README.md` whose YAML header
declares each role as a config, so `load_dataset(repo_id, role)` (or the staged folder itself) gives
that role's splits. `push` uploads the staged folder in one commit. Staging first means the payload
can be checked, and loaded, without the hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

if TYPE_CHECKING:
    from datasets import DatasetDict

CARD_FILE = "README.md"
ED_LICENSE = "cc-by-nc-4.0"
ED_CITATION = "Rashkin et al., 2019. Towards Empathetic Open-domain Conversation Models: a New Benchmark and Dataset."


def shard_path(role: str, split: str) -> str:
    return f"{role}/{split}-00000-of-00001.parquet"


def front_matter(roles: dict[str, list[str]], license_id: str) -> dict[str, Any]:
    return {
        "license": license_id,
        "language": ["en"],
        "task_categories": ["text-generation", "text-classification"],
        "tags": ["trace-distill", "empathetic-dialogue", "sft", "prompt-completion", "distillation"],
        "configs": [
            {"config_name": role, "data_files": [{"split": s, "path": shard_path(role, s)} for s in splits]}
            for role, splits in roles.items()
        ],
    }


def _role_section(role: str, record: Optional[dict]) -> str:
    if record is None:
        return f"### `{role}`\n\nNo build record (built outside `distill datasets`).\n"
    teacher, counts, backend = record["teacher"], record["counts"], record["teacher"]["backend"]
    drops = ", ".join(f"{why}: {n}" for why, n in counts["dropped"].items()) or "none"
    rows = ", ".join(f"{split} {n}" for split, n in record["rows"].items())
    return (
        f"### `{role}`\n\n"
        f"- teacher: `{backend.get('model')}` ({backend.get('backend_name') or backend.get('backend')}), "
        f"prompt version(s) {', '.join(map(str, teacher['prompt_versions']))}\n"
        f"- gold guidance shown to the teacher: emotion {'yes' if teacher['gold_emotion'] else 'no'}, "
        f"response {'yes' if teacher['gold_response'] else 'no'}\n"
        f"- filters: `{record['options']}`\n"
        f"- traces read {counts['read']}, kept {counts['kept']}, dropped: {drops}\n"
        f"- rows: {rows}\n"
    )


def render_card(records: dict[str, Optional[dict]], splits: dict[str, list[str]], license_id: str) -> str:
    header = yaml.safe_dump(front_matter(splits, license_id), sort_keys=False)
    sections = "\n".join(_role_section(role, records.get(role)) for role in splits)
    return f"""---
{header}---
# trace-distill SFT datasets

One config per agent role of trace-distill's empathetic-response pipeline, in TRL's conversational
prompt-completion form (`prompt`, `completion`, plus `messages`, `dialogue_id`, `conv_id`, `key`).
Load a role with `datasets.load_dataset("<this repo>", "<role>")`, or train on all of them with
`trace-distill train --datasets <this repo>`. Splits are by conversation: no `conv_id` is in two splits.

Source: EmpatheticDialogues ({ED_CITATION}), as prepared by the toolkit's `data_prep`; the replies and
labels the teacher wrote are model output. License: `{license_id}` (EmpatheticDialogues is CC BY-NC 4.0:
non-commercial use; set `--hub-license` when the source is another).

## Roles

{sections}"""


def stage(
    built: dict[str, DatasetDict], records: dict[str, Optional[dict]], out: Path, license_id: str = ED_LICENSE
) -> Path:
    """Write the hub payload to `out`: one parquet file per role and split, and the card."""
    splits = {}
    for role, dd in built.items():
        splits[role] = [s for s in dd if dd[s].num_rows > 0]  # the hub's loader rejects empty data files
        for split in splits[role]:
            path = out / shard_path(role, split)
            path.parent.mkdir(parents=True, exist_ok=True)
            dd[split].to_parquet(str(path))
    (out / CARD_FILE).write_text(render_card(records, splits, license_id), encoding="utf-8")
    return out


def push(staged: Path, repo_id: str, private: bool = False, api: Any = None) -> str:
    """Create the dataset repo and upload the staged folder in one commit; returns its URL."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(
        folder_path=str(staged), repo_id=repo_id, repo_type="dataset", commit_message="trace-distill role datasets"
    )
    return f"https://huggingface.co/datasets/{repo_id}"


def load_role(repo_or_folder: str, role: str) -> DatasetDict:
    """One role's splits from a hub dataset id or a staged folder (`load_dataset(<repo>, <role>)`)."""
    from datasets import load_dataset

    return load_dataset(repo_or_folder, role)
