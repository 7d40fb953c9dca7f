"""Sweeps: one scenario over many seeds (and policies), run here or by an engine that
already exists, then pooled with intervals (docs/simulate.md, "Sweeps").

A sweep is a list of (policy, seed) runs. Each run writes one result file,
`<out>/<policy>/seed-<seed>.json`: the result document without its series, timeline and
fault list (the pooled figures need only the latencies and the counts). A run whose file
is already there is not run again, so a sweep that stopped resumes where it stopped.

Three ways to run one:
- here, in parallel local processes (`navarch simulate SCENARIO --seeds 31-60`);
- as a Slurm array job (`--emit slurm`): index i runs the i-th seed, every policy;
- as a Kubernetes Indexed Job (`--emit kubernetes`): the same, by JOB_COMPLETION_INDEX,
  writing to a volume mounted at the output directory.

`navarch simulate merge DIR` pools the files: per policy, the latencies of every seed
together, p50 and p95 with bootstrap 95 % intervals (the seeds resampled with
replacement, whole: faults within one run are not independent; Efron & Tibshirani, "An
Introduction to the Bootstrap", 1993, ch. 13 percentile intervals), the mean availability
with its interval, the wrongful terminations summed.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from navarch.errors import ConfigError
from navarch.simulate.policies import COMPARE_POLICIES
from navarch.simulate.report import percentile
from navarch.simulate.scenario import Scenario, load_scenario

#: The most seeds one sweep takes (a typo such as 1-100000 is refused, not run).
MAX_SEEDS = 10_000
#: Bootstrap resamples per figure: enough for stable 2.5/97.5 % points at 30 seeds.
BOOTSTRAP_RESAMPLES = 2000
#: The result document's keys a sweep file leaves out (large, and not pooled).
_DROPPED = ("series", "timeline", "fault_list", "wrongful_termination_causes")
#: The latencies pooled across seeds: result key -> the figure's name.
POOLED = {
    "fault_to_cordon_s": "fault_to_cordon",
    "fault_to_serving_s": "fault_to_serving",
}
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_SBATCH_SAFE = re.compile(r"^[A-Za-z0-9._/-]+$")


def parse_seeds(text: str) -> tuple[int, ...]:
    """ "31-60" or "1,4,7-9" -> the seeds in order, without repeats.

    Raises ConfigError (key path --seeds) for anything else, a range that runs backwards,
    or more than MAX_SEEDS seeds."""
    seeds: dict[int, None] = {}
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ConfigError(
                f"--seeds {text!r}: {part.strip()!r} is not a seed or a range",
                key_path="--seeds",
                hint="e.g. --seeds 31-60 or --seeds 1,4,7-9",
            )
        first = int(m.group(1))
        last = int(m.group(2) or first)
        if last - first + len(seeds) >= MAX_SEEDS:
            raise ConfigError(
                f"--seeds {text!r}: more than {MAX_SEEDS} seeds",
                key_path="--seeds",
                hint="split the sweep",
            )
        seeds.update(dict.fromkeys(range(first, last + 1)))
    return tuple(seeds)


def parse_policies(text: str | None) -> tuple[str, ...]:
    """ "default,spares" -> the policy names (navarch.simulate.policies.COMPARE_POLICIES);
    None -> ("default",), the scenario as written. Raises ConfigError for an unknown name."""
    if not text:
        return ("default",)
    known = [name for name, _ in COMPARE_POLICIES]
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(
            f"--policies {text!r}: unknown policy {', '.join(unknown) or '(none)'}",
            key_path="--policies",
            hint=f"choose from {', '.join(known)}",
        )
    return names


def with_policy(scenario: Scenario, policy: str) -> Scenario:
    """The scenario under one of COMPARE_POLICIES, its own `pool:` overrides kept where
    the policy does not set the same key."""
    overrides = dict(COMPARE_POLICIES)[policy]
    return replace(scenario, pool_overrides={**scenario.pool_overrides, **overrides})


def result_path(out: Path, policy: str, seed: int) -> Path:
    """Where the run of (policy, seed) writes its result."""
    return out / policy / f"seed-{seed}.json"


def run_one(scenario_path: str, policy: str, seed: int, out: str) -> str:
    """Simulate one (policy, seed) and write its result file (written whole, then renamed
    into place: a killed run leaves no half file) -> the file's path. Runs in a worker
    process or an engine's array task."""
    import logging

    from navarch.simulate.engine import simulate

    logging.getLogger("navarch.agent").setLevel(logging.ERROR)
    scenario = with_policy(load_scenario(scenario_path), policy)
    doc = simulate(scenario, seed=seed)
    doc = {k: v for k, v in doc.items() if k not in _DROPPED}
    doc["policy"] = policy
    path = result_path(Path(out), policy, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.part")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(path)
    return str(path)


def run_sweep(
    scenario_path: str,
    seeds: Sequence[int],
    policies: Sequence[str],
    out: Path,
    jobs: int,
    on_done: Callable[[str, int], None] | None = None,
) -> list[Path]:
    """Run every (policy, seed) not yet in `out`, `jobs` at a time in local processes;
    on_done(policy, seed) as each finishes -> the result files of the whole sweep.
    Raises the first run's error after the others finished (their files stay)."""
    todo = [(p, s) for p in policies for s in seeds if not result_path(out, p, s).exists()]
    first_error: BaseException | None = None
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo)))) as pool:
            futures = {pool.submit(run_one, scenario_path, p, s, str(out)): (p, s) for p, s in todo}
            for future in as_completed(futures):
                error = future.exception()
                if error is not None:
                    first_error = first_error or error
                elif on_done is not None:
                    on_done(*futures[future])
    if first_error is not None:
        raise first_error
    return [result_path(out, p, s) for p in policies for s in seeds]


def run_index(
    scenario_path: str, seeds: Sequence[int], policies: Sequence[str], out: Path, index: int
) -> list[Path]:
    """An engine's array task: the index-th seed under every policy, in this process.
    Raises ConfigError for an index outside the sweep."""
    if not 0 <= index < len(seeds):
        raise ConfigError(
            f"--index {index}: the sweep has {len(seeds)} seeds (0-{len(seeds) - 1})",
            key_path="--index",
            hint="an array job's indices run from 0 to the number of seeds minus one",
        )
    seed = seeds[index]
    return [
        Path(run_one(scenario_path, p, seed, str(out)))
        for p in policies
        if not result_path(out, p, seed).exists()
    ]


@dataclass(frozen=True)
class JobSpec:
    """What an engine's job file needs: the command each index runs, and how many."""

    scenario: str
    seeds: str
    policies: str
    out: str
    count: int
    name: str

    def sh(self) -> dict[str, str]:
        """The job's values as shell words (shlex.quote), for the sbatch script."""
        import shlex

        return {
            k: shlex.quote(v)
            for k, v in (
                ("scenario", self.scenario),
                ("seeds", self.seeds),
                ("policies", self.policies),
                ("out", self.out),
            )
        }


def job_spec(scenario_path: str, seeds_text: str, policies: Sequence[str], out: Path) -> JobSpec:
    """The job of a sweep, with absolute paths (the engine runs it from elsewhere)."""
    scenario = load_scenario(scenario_path)
    return JobSpec(
        scenario=str(Path(scenario_path).resolve()),
        seeds=seeds_text,
        policies=",".join(policies),
        out=str(out.resolve()),
        count=len(parse_seeds(seeds_text)),
        name=re.sub(r"[^a-z0-9-]+", "-", f"navarch-sweep-{scenario.name}".lower())[:52],
    )


def render_job(spec: JobSpec, engine: str) -> str:
    """The job file for `engine` ("slurm": an sbatch array script; "kubernetes": an
    Indexed Job manifest, batch/v1 completionMode Indexed) from templates/."""
    from navarch.templating import environment

    if engine == "slurm" and not _SBATCH_SAFE.match(spec.out):
        # An #SBATCH line is not shell: a quote or a space there cannot be escaped.
        raise ConfigError(
            f"--out {spec.out!r}: a Slurm job's output directory must be a plain path",
            key_path="--out",
            hint="use letters, digits, '.', '_', '-' and '/' only",
        )
    name = {"slurm": "sweep-slurm.sh.j2", "kubernetes": "sweep-job.yaml.j2"}[engine]
    env = environment(keep_trailing_newline=True)
    return env.get_template(name).render(job=spec, sh=spec.sh())


def _interval(
    per_seed: Sequence[Sequence[float]], stat: Callable[[list[float]], float | None]
) -> tuple[float | None, float | None]:
    """The 95 % percentile-bootstrap interval of stat over the pooled values, resampling
    whole seeds; a fixed generator, so a merge of the same files prints the same."""
    rng = random.Random(0)
    figures: list[float] = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        pooled: list[float] = []
        for _ in per_seed:
            pooled.extend(per_seed[rng.randrange(len(per_seed))])
        value = stat(pooled)
        if value is not None:
            figures.append(value)
    return percentile(figures, 0.025), percentile(figures, 0.975)


def _quantile(q: float) -> Callable[[list[float]], float | None]:
    return lambda values: percentile(values, q)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def merge_docs(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Result files -> {"policies": {policy: figures}}: per policy the seeds, faults,
    wrongful terminations, the pooled p50/p95 of each latency in POOLED and the mean
    availability, each figure as {"value", "low", "high"} (seconds for latencies)."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_policy.setdefault(str(doc.get("policy", "default")), []).append(doc)
    out: dict[str, Any] = {}
    for policy, runs in sorted(by_policy.items()):
        runs.sort(key=lambda d: int(d.get("seed", 0)))
        figures: dict[str, Any] = {
            "seeds": [d.get("seed") for d in runs],
            "faults": sum(int(d.get("faults", 0)) for d in runs),
            "wrongful_terminations": sum(int(d.get("wrongful_terminations", 0)) for d in runs),
        }
        for key, name in POOLED.items():
            per_seed = [list(d.get(key) or []) for d in runs]
            pooled = [v for values in per_seed for v in values]
            for label, q in (("p50", 0.5), ("p95", 0.95)):
                low, high = _interval(per_seed, _quantile(q))
                figures[f"{label}_{name}_s"] = {
                    "value": percentile(pooled, q),
                    "low": low,
                    "high": high,
                }
        avail = [[float(d.get("availability", 0.0))] for d in runs]
        low, high = _interval(avail, _mean)
        figures["availability"] = {
            "value": _mean([a[0] for a in avail]),
            "low": low,
            "high": high,
        }
        out[policy] = figures
    return {"policies": out}


def merge_dir(directory: Path) -> dict[str, Any]:
    """merge_docs of every `<policy>/seed-*.json` under directory. Raises ConfigError when
    there is none, or one that is not a result document (naming the file)."""
    docs = []
    for path in sorted(directory.glob("*/seed-*.json")):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict) or "seed" not in doc:
                raise ValueError("no seed")
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{path}: not a sweep result ({exc})",
                file=str(path),
                hint="remove it, or run its seed again (delete the file and rerun the sweep)",
            ) from exc
        docs.append(doc)
    if not docs:
        raise ConfigError(
            f"{directory}: no sweep results (<policy>/seed-N.json)",
            file=str(directory),
            hint="run `navarch simulate SCENARIO --seeds A-B --out DIR` first",
        )
    return merge_docs(docs)


def merge_text(merged: dict[str, Any]) -> str:
    """A Markdown table of merge_docs: one row per policy, latencies in minutes as
    "value [low, high]"."""

    def minutes(f: dict[str, Any]) -> str:
        if f["value"] is None:
            return "n/a"
        lo, hi = (f"{x / 60:.2f}" if x is not None else "n/a" for x in (f["low"], f["high"]))
        return f"{f['value'] / 60:.2f} [{lo}, {hi}]"

    head = ["policy", "seeds", "faults", "cordon p50 min", "cordon p95 min"]
    head += ["serving p50 min", "serving p95 min", "availability", "wrongful"]
    rows = [head, ["---"] * len(head)]
    for policy, f in merged["policies"].items():
        a = f["availability"]
        rows.append(
            [
                policy,
                str(len(f["seeds"])),
                str(f["faults"]),
                minutes(f["p50_fault_to_cordon_s"]),
                minutes(f["p95_fault_to_cordon_s"]),
                minutes(f["p50_fault_to_serving_s"]),
                minutes(f["p95_fault_to_serving_s"]),
                f"{a['value']:.5f} [{a['low']:.5f}, {a['high']:.5f}]",
                str(f["wrongful_terminations"]),
            ]
        )
    return "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"


def default_jobs() -> int:
    """Local processes for a sweep: one per CPU this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
