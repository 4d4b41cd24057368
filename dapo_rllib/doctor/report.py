"""The doctor's results: one `Check` per row, the table they print as, and `run_doctor`, which runs them all."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

PASS, FAIL, NOTE = "pass", "FAIL", "note"


@dataclasses.dataclass(frozen=True)
class Check:
    """One check's outcome: `status` PASS or FAIL, or NOTE for what is neither (a capability the model lacks),
    a line for the table (`detail`), and the measured values (`values`, for the JSON report)."""

    name: str
    status: str
    detail: str
    values: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def format_table(model: str, checks: list[Check]) -> str:
    """The checks as a table of check, status and detail, under a title naming `model`."""
    width = max(len(check.name) for check in checks)
    lines = [f"rllib doctor {model}", ""]
    lines += [f"  {check.name:<{width}}  {check.status:<4}  {check.detail}" for check in checks]
    failed = [check.name for check in checks if check.failed]
    lines += [
        "",
        f"{len(failed)} of {len(checks)} checks failed: {', '.join(failed)}" if failed else "all checks passed",
    ]
    return "\n".join(lines)


def write_json(path: str | Path, model: str, settings: dict[str, Any], checks: list[Check]) -> Path:
    """The checks as JSON at `path`: the model, the settings checked with, and each check's values."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"model": model, "settings": settings, "checks": [dataclasses.asdict(check) for check in checks]}
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
