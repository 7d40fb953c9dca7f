"""`navarch simulate SCENARIO --seeds A-B` and `navarch simulate merge DIR`: a scenario
over many seeds, run in local processes or written as an engine's job, and pooled
(navarch.simulate.sweep, docs/simulate.md "Sweeps")."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from navarch.errors import ConfigError


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the sweep here (--jobs processes), one index of it (--index, an engine's array
    task), or write its job file (--emit slurm|kubernetes) to --out; exit 0."""
    from navarch.simulate.sweep import (
        default_jobs,
        job_spec,
        parse_policies,
        parse_seeds,
        render_job,
        run_index,
        run_sweep,
    )

    seeds = parse_seeds(args.seeds)
    policies = parse_policies(args.policies)
    out = Path(args.out or f"sweep-{Path(args.scenario).stem}")
    if args.emit:
        out.mkdir(parents=True, exist_ok=True)
        text = render_job(job_spec(args.scenario, args.seeds, policies, out), args.emit)
        path = out / ("sweep.sbatch" if args.emit == "slurm" else "sweep-job.yaml")
        path.write_text(text)
        submit = "sbatch" if args.emit == "slurm" else "kubectl apply -f"
        print(f"wrote {path}: {len(seeds)} seeds x {len(policies)} policies")
        print(f"submit: {submit} {path}; then: navarch simulate merge {out}")
        return 0
    if args.index is not None:
        for path in run_index(args.scenario, seeds, policies, out, args.index):
            print(f"wrote {path}")
        return 0
    total = len(seeds) * len(policies)
    done = [0]

    def finished(policy: str, seed: int) -> None:
        done[0] += 1
        print(f"[{done[0]}/{total}] {policy} seed {seed}", flush=True)

    jobs = args.jobs or default_jobs()
    print(f"sweep of {total} runs in {jobs} processes, results in {out}/", flush=True)
    run_sweep(args.scenario, seeds, policies, out, jobs, on_done=finished)
    return cmd_merge(argparse.Namespace(dir=str(out), json=args.json))


def cmd_merge(args: argparse.Namespace) -> int:
    """Pool a sweep's result files: a table of p50/p95 with bootstrap 95 % intervals per
    policy on stdout; --json FILE (or -) writes the figures; exit 0."""
    from navarch.simulate.sweep import merge_dir, merge_text

    if not args.dir:
        raise ConfigError(
            "navarch simulate merge needs the sweep's directory",
            hint="navarch simulate merge DIR (the --out of the sweep)",
        )
    merged = merge_dir(Path(args.dir))
    if args.json == "-":
        json.dump(merged, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    print(merge_text(merged), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return 0


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The sweep's flags on `navarch simulate`."""
    s.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="with `merge`: the sweep's directory (navarch simulate merge DIR)",
    )
    s.add_argument("--seeds", default=None, help="run a sweep: seeds such as 31-60 or 1,4,7-9")
    s.add_argument(
        "--policies",
        default=None,
        help="the sweep's policies, comma-separated (default, spares, replace-only, "
        "reboot-first-without-surge); default: the scenario as written",
    )
    s.add_argument("--jobs", type=int, default=None, help="local processes (default: CPUs)")
    s.add_argument("--out", default=None, help="the sweep's directory (default sweep-NAME)")
    s.add_argument(
        "--emit",
        choices=("slurm", "kubernetes"),
        default=None,
        help="write the sweep as a Slurm array job or a Kubernetes Indexed Job to --out "
        "instead of running it here",
    )
    s.add_argument(
        "--index",
        type=int,
        default=None,
        help="run only the sweep's INDEX-th seed (0-based: an array task's index)",
    )
