"""Every private vLLM member DAPO relies on still exists in the installed vLLM, and nothing in
dapo_rllib reaches one except through dapo_rllib.vllm_private."""

import ast
import inspect
import typing
from pathlib import Path

import pytest
import vllm

from dapo_rllib.models.lora import VLLM_MAX_LORA_RANKS
from dapo_rllib.vllm_private import PRIVATE_MEMBERS, RELOAD_FAILED_MESSAGE, VLLM_VERSION
from tests.support.private_members import is_present

PACKAGE = Path(__file__).resolve().parents[1] / "dapo_rllib"


def upgrade_note(what: str) -> str:
    return f"vLLM {vllm.__version__} {what} (checked against vLLM {VLLM_VERSION}); see dapo_rllib/vllm_private.py"


@pytest.mark.parametrize("member", PRIVATE_MEMBERS, ids=lambda m: f"{m.owner}.{m.name}")
def test_private_member_exists(member):
    assert is_present(member), upgrade_note(f"has no {member.owner}.{member.name}") + (
        f": DAPO needs it because it {member.why}"
    )


def test_the_reload_warning_library_logs_filters_is_still_vllms():
    from vllm.model_executor.model_loader.reload import layerwise

    assert f'logger.warning("{RELOAD_FAILED_MESSAGE}"' in inspect.getsource(layerwise), upgrade_note(
        f"no longer warns {RELOAD_FAILED_MESSAGE!r}: dapo_rllib.library_logs filters that message"
    )


def test_the_lora_ranks_dapo_offers_are_vllms():
    from vllm.config.lora import MaxLoRARanks

    assert typing.get_args(MaxLoRARanks) == VLLM_MAX_LORA_RANKS, upgrade_note(
        f"accepts max_lora_rank in {typing.get_args(MaxLoRARanks)}, dapo_rllib.models.lora.VLLM_MAX_LORA_RANKS "
        f"says {VLLM_MAX_LORA_RANKS}"
    )


def names_used(tree: ast.AST) -> set[str]:
    """Attributes read off anything but `self` (DAPO's own `load_weights`, RLlib's `self.model_config`
    share a name with vLLM's), names imported, and strings (getattr/hasattr)."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)
    return used


def test_no_private_vllm_member_is_used_outside_vllm_private():
    # The layerwise logger is named by its string (RELOAD_LOGGER) and MaxLoRARanks repeated as a
    # constant (tested above): neither is reached. RLlib's RLModule has a `model_config` of its own.
    reached = {m.name for m in PRIVATE_MEMBERS} - {"logger", "MaxLoRARanks", "model_config"}
    offenders = [
        f"{path.relative_to(PACKAGE)}: {sorted(reached & names_used(ast.parse(path.read_text())))}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "vllm_private.py" and reached & names_used(ast.parse(path.read_text()))
    ]
    assert offenders == []
