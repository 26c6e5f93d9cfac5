"""`python -m bench.against REV [--rounds 2] [BENCH OPTIONS...]`: the benchmark of an earlier
commit and of this checkout, alternated round by round in one session, so that a change
shows as a ratio measured under the same load rather than against figures of another day.

REV's tree is exported (`git archive`) under the temp directory with a virtualenv of its own
(`pip install -e '.[bench]'`, once per commit); each round runs `python -m bench` in REV's
tree and in this one, the first of the two taking turns. The options after REV go to both
(`--only dispatch --only io`, `--repeat 1`, ...). It prints, for every figure both trees
report, the median over the rounds of each and their ratio (this checkout / REV).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m bench.against", description=__doc__)
    parser.add_argument("rev", help="the commit to compare with (any git revision)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree (default 2)")
    args, bench_args = parser.parse_known_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args, bench_args


def export(rev: str) -> Path:
    """REV's tree with a benchmark virtualenv, made once per commit."""
    rev_parse = ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"]
    sha = subprocess.run(rev_parse, cwd=ROOT, check=True, capture_output=True, text=True)
    sha = sha.stdout.strip()
    tree = Path(tempfile.gettempdir()) / "delayq-bench-trees" / sha[:12]
    python = tree / ".venv-bench" / "bin" / "python"
    if not python.exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv-bench")], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "-e", f"{tree}[bench]"], check=True)
    return tree


def run_bench(tree: Path, python: str, bench_args: list[str]) -> dict[str, Any]:
    """One `python -m bench` in `tree`: its JSON line, its figure lines echoed."""
    done = subprocess.run(
        [python, "-m", "bench", *bench_args], cwd=tree, check=True, capture_output=True, text=True
    )
    lines = done.stdout.splitlines()
    for line in lines:
        if not line.startswith("{"):
            print(f"  {line}", flush=True)
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def numbers(report: dict[str, Any]) -> dict[str, float]:
    """Every single number among the workloads' figures, by its dotted path."""
    found: dict[str, float] = {}

    def walk(path: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{path}.{key}" if path else str(key), inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            found[path] = float(value)

    for name, workload in report.get("workloads", {}).items():
        walk(name, workload.get("figures", {}))
    return found


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the runs that report it."""
    keys = {key for run in runs for key in run}
    return {key: statistics.median(run[key] for run in runs if key in run) for key in keys}


def main(argv: list[str] | None = None) -> int:
    args, bench_args = parse_args(argv)
    old = export(args.rev)
    trees = {
        args.rev: (old, str(old / ".venv-bench" / "bin" / "python")),
        "this checkout": (ROOT, sys.executable),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
        for name in order:
            tree, python = trees[name]
            print(f"round {round_number + 1}/{args.rounds}: {name}", flush=True)
            runs[name].append(numbers(run_bench(tree, python, bench_args)))
    before, after = median_of(runs[args.rev]), median_of(runs["this checkout"])
    print(f"{'figure':60} {args.rev[:14]:>14} {'this checkout':>14} {'ratio':>7}")
    for key in sorted(before.keys() & after.keys()):
        ratio = after[key] / before[key] if before[key] else float("nan")
        print(f"{key:60} {_shown(before[key]):>14} {_shown(after[key]):>14} {ratio:7.3f}")
    return 0


def _shown(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


if __name__ == "__main__":
    sys.exit(main())
