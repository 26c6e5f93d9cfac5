"""bench.against's reading of two trees' bench reports: every number by its path, medians
over rounds, and a figure only one tree reports kept out of the comparison."""

from __future__ import annotations

from bench.against import median_of, numbers


def report(jobs_per_s: float, extra: dict[str, object] | None = None) -> dict[str, object]:
    figures: dict[str, object] = {
        "jobs_per_s": {"delayq": jobs_per_s, "huey": 100.0},
        "wall_s": {"delayq": [1.0, 2.0]},  # lists are per-repeat detail, not a figure
        "fastest_peer": "huey",
        "ok": True,
        **(extra or {}),
    }
    return {"workloads": {"dispatch": {"figures": figures, "targets": {"x": {"limit": 3}}}}}


def test_every_number_of_the_figures_by_its_path_and_nothing_else():
    assert numbers(report(5000.0, {"n": 20000})) == {
        "dispatch.jobs_per_s.delayq": 5000.0,
        "dispatch.jobs_per_s.huey": 100.0,
        "dispatch.n": 20000.0,
    }


def test_the_median_of_each_figure_over_the_rounds_that_report_it():
    rounds = [numbers(report(rate)) for rate in (4000.0, 5000.0, 9000.0)]
    rounds[0]["dispatch.only_once"] = 7.0
    medians = median_of(rounds)
    assert medians["dispatch.jobs_per_s.delayq"] == 5000.0
    assert medians["dispatch.only_once"] == 7.0
