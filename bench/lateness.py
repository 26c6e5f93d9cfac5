"""Workload 5, lateness: N jobs due evenly over a spread of seconds, added while a
`delayq run --loop --for D` started before the first is due is already up. Each job records
(start - due) itself: delayq's handler from `delayq.current_job().run_at` and time.time(),
each peer's job from the due time it was handed. Reports p50, p99 and max in ms, and how
many jobs started early (there must be none) or never ran.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

import delayq

from . import env, handlers, peers
from .report import Result, Target, median, number, percentile
from .sizes import Sizes

P99_TARGET_MS = 20.0
MAX_TARGET_MS = 100.0


def run(sizes: Sizes) -> Result:
    n, spread = sizes.lateness_jobs, sizes.lateness_spread
    samples: dict[str, list[dict[str, float]]] = {"delayq": []}
    errors: dict[str, str] = {}
    for attempt in range(sizes.repeat):
        env.log(f"lateness {attempt + 1}/{sizes.repeat}: {n} jobs over {spread:g}s")
        samples["delayq"].append(summarize(_delayq(n, spread, sizes.lateness_for), n))
        for peer in sizes.lateness_peers:
            if peer in errors:
                continue
            try:
                recorded = peers.lateness(peer, n, spread, sizes.lateness_for)
                samples.setdefault(peer, []).append(summarize(recorded, n))
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                errors[peer] = f"{type(exc).__name__}: {exc}"
                env.log(f"lateness: {peer} failed: {errors[peer]}")
    return _result(n, spread, samples, errors)


def _delayq(
    n: int,
    spread: float,
    duration: float,
    method: str = "record_lateness",
    options: Sequence[str] = (),
    url: str | None = None,
    database: str | None = None,
) -> list[float]:
    """Lateness of n jobs of bench.handlers.<method> due over `spread` seconds, each added
    one at a time while `delayq run --loop --for duration [options]` is up (on Redis at
    `url` and the table on `database`, if given: see env.fresh_queue)."""
    with env.fresh_queue(url, database) as queue:
        loop = subprocess.Popen(
            env.python("-m", "delayq", "run", "--loop", "--for", f"{duration:g}s", *options),
            cwd=env.ROOT,
            env=env.child_env(url, database),
        )
        try:
            time.sleep(peers.WORKER_STARTUP)
            specs = [
                delayq.JobSpec(env.HANDLERS, method, None, at=due)
                for due in env.due_times(n, spread, env.lead_for(n))
            ]
            for spec in specs:  # one at a time: q.add_many is what enqueue measures
                queue.add(spec.class_path, spec.method, spec.data, at=spec.at)
            loop.wait(timeout=duration + 60)
        finally:
            if loop.poll() is None:
                loop.kill()
                loop.wait()
    if loop.returncode != 0:
        raise RuntimeError(f"delayq run --loop exited {loop.returncode}")
    client = handlers.client()
    return [float(value) for value in client.lrange(handlers.LATENESS_KEY, 0, -1)]


def summarize(lateness: Sequence[float], expected: int) -> dict[str, float]:
    """p50, p99 and max in ms, and counts of early starts and jobs that never ran."""
    if not lateness:
        return {
            "p50_ms": float("nan"),
            "p99_ms": float("nan"),
            "max_ms": float("nan"),
            "early": 0,
            "missing": expected,
        }
    return {
        "p50_ms": percentile(lateness, 0.50) * 1000,
        "p99_ms": percentile(lateness, 0.99) * 1000,
        "max_ms": max(lateness) * 1000,
        "early": sum(1 for value in lateness if value < 0),
        "missing": expected - len(lateness),
    }


def _result(
    n: int, spread: float, samples: dict[str, list[dict[str, float]]], errors: dict[str, str]
) -> Result:
    systems = {name: combine(runs) for name, runs in samples.items()}
    parts = [
        f"{name} p50 {number(s['p50_ms'])} ms, p99 {number(s['p99_ms'])} ms, max "
        f"{number(s['max_ms'])} ms, early {s['early']:.0f}, missed {s['missing']:.0f}"
        for name, s in systems.items()
    ]
    parts += [f"{name} failed ({why})" for name, why in errors.items()]
    ours = systems["delayq"]
    figures = {"n": n, "spread_s": spread, "systems": systems, "runs": samples, "errors": errors}
    line = f"lateness  N={n} over {spread:g}s: " + "; ".join(parts)
    targets = [
        Target("p99 ms", ours["p99_ms"], "<=", P99_TARGET_MS),
        Target("max ms", ours["max_ms"], "<=", MAX_TARGET_MS),
        Target("early starts", ours["early"] + ours["missing"], "<=", 0),
    ]
    return Result(line, figures, targets)


def combine(runs: list[dict[str, float]]) -> dict[str, float]:
    """Medians over the repeats of p50/p99/max; early and missing summed over all of them."""
    combined = {key: median([run[key] for run in runs]) for key in ("p50_ms", "p99_ms", "max_ms")}
    combined["worst_max_ms"] = max(run["max_ms"] for run in runs)
    combined["early"] = sum(run["early"] for run in runs)
    combined["missing"] = sum(run["missing"] for run in runs)
    return combined
