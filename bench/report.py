"""What a part of the benchmark found, printed as it goes."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Report:
    """Targets missed and correctness failures; only the latter fail the run.

    A missed target is a finding, not a failure: a benchmark measures, it does not gate.
    """

    missed: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)

    @staticmethod
    def say(*lines: str) -> None:
        """Print now, so a long run shows its progress."""
        for line in lines:
            print(line, flush=True)

    def merge(self, other: Report) -> None:
        """Add another part's findings to this one."""
        self.missed.extend(other.missed)
        self.failures.extend(other.failures)
