"""What ``cgfast run`` turns on, carried to every process of the program in the
environment (``CGFAST_RUN``, JSON)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

ENV_VAR = "CGFAST_RUN"


@dataclass(frozen=True)
class ProfileWindow:
    """``--profile``: profile ``replays`` graph replays per process after ``skip``."""

    replays: int
    skip: int


@dataclass(frozen=True)
class RunSettings:
    """One run's settings, the same in each of its processes."""

    out: str  # the absolute directory annotation files (and --profile traces) go to
    record: bool = True  # every capture recorded
    modules: bool = True  # modules named without a handle (annotate_all_modules)
    inductor: bool = True  # the Inductor toggle on
    stacks: bool = False  # launch lines
    flops: bool = False  # each op's FLOPs and bytes on its nodes
    profile: Optional[ProfileWindow] = None

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Optional[RunSettings]:
        """The run's settings, or ``None`` outside ``cgfast run``; ``ValueError`` when the
        variable is not what ``cgfast run`` writes."""
        text = environ.get(ENV_VAR)
        if not text:
            return None
        try:
            fields = json.loads(text)
            profile = fields.pop("profile", None)
            return cls(**fields, profile=ProfileWindow(**profile) if profile else None)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{ENV_VAR} is not what cgfast run writes: {exc}") from None
