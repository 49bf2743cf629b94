"""`accelpolicy lint` and `accelpolicy test rules/` wall time with the CEL type and cost checks on and off.

Run: ``.venv/bin/python benchmarks/lint_checks.py [RULES]`` (figures, not pass/fail). Both are timed without
the compiled-rules cache (every expression parsed and checked; with a warm cache a load runs no static
check at all); each figure is the best of 3 runs in one process.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from runtime.rules.loader import rule_problems


def best(fn, runs: int = 3) -> float:
    """The fastest of ``runs`` calls of ``fn``, seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def suites(rules: Path, types: bool) -> None:
    """``accelpolicy test rules/`` without the compiled-rules cache: load (checks ``types``) and run every case."""
    from runtime import ruletests
    from runtime.engine.policy import Policy

    problems, ruleset = rule_problems(rules, cache=None, types=types)
    assert not problems, problems
    runner = ruletests.Runner(Policy(ruleset), rules.parent)
    results = list(runner.run_all(ruletests.load_cases(rules)))
    assert all(r.passed for r in results)


def main() -> None:
    """Print lint's and the rule suites' time with the checks on and off."""
    rules = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "rules")
    rule_problems(rules, cache=None)  # warm imports and the parser
    on = best(lambda: rule_problems(rules, cache=None, types=True))
    off = best(lambda: rule_problems(rules, cache=None, types=False))
    print(f"lint (no cache) {rules}: types+costs on {on:.3f} s, off {off:.3f} s, checks {on - off:.3f} s")
    on = best(lambda: suites(rules, True))
    off = best(lambda: suites(rules, False))
    print(f"test rules (no cache) {rules}: types+costs on {on:.3f} s, off {off:.3f} s, checks {on - off:.3f} s")


if __name__ == "__main__":
    main()
