"""bench's request-path trace: one experiment request through a copy of the project, counted
on the caller's thread."""
from __future__ import annotations

from bench import requestpath


def test_the_trace_counts_the_experiment_requests_way_through_sagegates_code() -> None:
    counts = requestpath.trace(requestpath.ROOT)
    per_module = counts["per_module"]
    assert isinstance(per_module, dict)
    # the request went through the route, the experiment's assignment and the endpoint call,
    # and nothing outside sagegate's own code was counted
    assert {"app", "chalicelib.experiments.assign"} <= set(per_module)
    assert all(name == "app" or name.startswith("chalicelib.") for name in per_module)
    assert counts["calls"] == sum(per_module.values())
    assert counts["modules"] == len(per_module)
    assert 0 < counts["switches"] < counts["calls"]  # type: ignore[operator]
    assert counts["functions"] <= counts["calls"]  # type: ignore[operator]
    lines = requestpath.lines("this tree", counts)
    assert lines[0].startswith(f"  this tree: {counts['calls']} calls into")
