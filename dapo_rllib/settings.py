"""Feature settings: frozen, typed objects that each feature owns, checked by their own `validate()`.

`DAPOConfig` stays RLlib's flat façade: users write `.training(lr=..., lora_rank=...)`, and RLlib copies,
serializes and restores the config by its flat attributes. A feature's settings class names its flat
settings (``prefix`` + field name, e.g. `LoraSettings.rank` is ``lora_rank``), gives their defaults
(DAPO's reference values) and checks them; `DAPOConfig` sets the defaults and builds the object from its
attributes when the feature needs it (`from_flat`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self


def require(ok: bool, message: str) -> None:
    """A settings check: raise `message` (which names the bad setting and what was expected) unless `ok`."""
    if not ok:
        raise ValueError(message)


#: Field metadata of a feature setting that is not a flat setting of its own (filled by `from_flat`'s extra).
NOT_FLAT = {"flat": False}


def _flat_fields(cls) -> list[dataclasses.Field]:
    return [field for field in dataclasses.fields(cls) if field.metadata.get("flat", True)]


def _default(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class FeatureSettings:
    """Base of the feature settings: the mapping to `DAPOConfig`'s flat attributes."""

    #: Prefix of the flat setting names (``lora_`` for `LoraSettings`).
    prefix: ClassVar[str] = ""

    @classmethod
    def flat_names(cls) -> dict[str, str]:
        """{flat setting name: field name}."""
        return {cls.prefix + field.name: field.name for field in _flat_fields(cls)}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """{flat setting name: default}: the values `DAPOConfig()` starts from."""
        return {cls.prefix + field.name: _default(field) for field in _flat_fields(cls)}

    @classmethod
    def from_flat(cls, source: Any, **extra: Any) -> Self:
        """The settings held by `source`'s flat attributes (a `DAPOConfig`); `extra` fills fields
        that have no flat setting of their own."""
        return cls(**{field: getattr(source, flat) for flat, field in cls.flat_names().items()}, **extra)

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting; change nothing."""
