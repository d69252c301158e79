"""fedvote against its peers on the same jobs: Flower's simulation engine and Apple's pfl (issue 21, item 1).

Jobs (:mod:`benchmarks.peers_jobs`; each built once by fedvote and written to one file that
every framework reads: the same partition, test set, public queries, θ⁰ and settings):

* ``vote digits N=10/50/100``: the PATE voting step — every agent trains its MLP teacher
  (fedvote's defaults: Adam, 40 epochs) and releases noisy one-hot votes on Q = 100 public
  queries (its share N(0, σ²/N), σ calibrated by fedvote for its default ε = 4); the
  server sums and argmaxes. fedvote (LocalTransport: batched teachers, one ``vote_sum``)
  and Flower (one ClientApp per agent, one round). Not in pfl (peers_pfl.py says why).
* ``dp-fedavg digits N=50`` and ``dp-fedavg mnist N=100`` (600 records an agent, MLP
  784-128-10): T = 100 rounds, q = 0.05, E = 20 SGD steps of B = 32, η = 0.1·0.99ᵗ,
  S = 0.08, σ = 0.767, the server adding N(0, σ²S²) to the sum over q·N (fedvote's
  ``--noise server``, the mechanism the peers implement). fedvote (``fedvote.runner.run``,
  as ``fedvote run`` runs it), Flower, pfl; fedvote's default distributed noise as an extra row.

Every run is a fresh subprocess of this one (fedvote and Flower in .venv's interpreter, pfl
in .venv-peers'), repeats interleaved with the order rotated each repeat and the noise seed
changed each repeat (the same seeds for every framework); medians over the repeats.
Times: ``wall`` — the subprocess from spawn to exit (interpreter, imports, Ray's start-up,
data, job, ε); ``job`` — without the fixed start-up: fedvote's ``run`` call (data split,
rounds, evaluation, ε accounting) or the vote step with its data split; Flower's rounds
after a warm-up round that starts Ray's actors and loads the data (ε not included, computed
here by dp-accounting); pfl's set-up (datasets, its accountant) plus ``algorithm.run``;
``rounds`` — the training rounds alone (fedvote's ``method_s``, pfl's ``algorithm.run``,
Flower's rounds); ``same work`` — what every framework's job does: the rounds (or the vote)
and the final evaluation, without loading the data or accounting ε (fedvote's job less its
``data_s`` and ``accounting_s``; Flower's job, which does neither; pfl's ``algorithm.run`` and
evaluation, its set-up of datasets and accountant left out): the like-for-like column. The load average is recorded before and after: the machine may be shared.

Run: ``python benchmarks/bench_peers.py`` (``make bench``; pfl needs ``make bench-peers-env``,
else its rows say so); ``--quick`` for a smoke run (one repeat: the N=10 vote in fedvote and Flower, DP-FedAvg
digits at T = 5 in fedvote and pfl; no results file);
``--threads`` sets torch's threads for fedvote and pfl (Flower: one ClientApp per core,
one thread each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, default_data_dir, print_table, write_results
from benchmarks.peers_jobs import DELTA, FedAvgJob, Job, VoteJob, export

PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PFL_MISSING = "pfl not installed: make bench-peers-env"
RAY_MISSING = 'Ray not installed: pip install "fedvote[simulation]"'

VOTE_NOT_IN_PFL = "not expressed in pfl (its algorithms aggregate model statistics; see peers_pfl.py)"

JOBS: list[Job] = [
    VoteJob("digits", 10),
    VoteJob("digits", 50),
    VoteJob("digits", 100),
    FedAvgJob("digits", 50),
    FedAvgJob("mnist", 100),
]

COLUMNS = [
    {"key": "job", "label": "job"},
    {"key": "framework", "label": "framework"},
    {"key": "wall_s", "label": "wall s (with start-up)", "format": ".2f"},
    {"key": "job_s", "label": "job s (no start-up)", "format": ".2f"},
    {"key": "rounds_s", "label": "rounds s", "format": ".2f"},
    {"key": "startup_s", "label": "start-up s", "format": ".2f"},
    {"key": "speedup_wall", "label": "peer/fedvote wall", "format": ".1f"},
    {"key": "speedup_job", "label": "peer/fedvote job", "format": ".1f"},
    {"key": "speedup_rounds", "label": "peer/fedvote rounds", "format": ".1f"},
    {"key": "work_s", "label": "same work s (rounds + evaluation)", "format": ".2f"},
    {"key": "speedup_work", "label": "peer/fedvote same work", "format": ".1f"},
    {"key": "accuracy", "label": "accuracy (mean)", "format": ".4f"},
    {"key": "epsilon", "label": "ε", "format": ".3f"},
    {"key": "epsilon_source", "label": "ε from"},
    {"key": "note", "label": "note"},
]


def flower_epsilon(job: FedAvgJob) -> float:
    """ε of T rounds of the Poisson-subsampled Gaussian (q, σ) at δ: dp-accounting's PLD, add/remove.

    Flower's run uses no DP wrapper (its ``DifferentialPrivacyServerSideFixedClipping``
    is another mechanism), so its ε is this, from the same σ, q, T as the others.
    """
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(job.sampling_rate, dp_accounting.GaussianDpEvent(job.sigma)), job.rounds)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    return float(accountant.compose(event).get_epsilon(DELTA))


def frameworks(job: Job, quick: bool = False) -> list[str]:
    """Who runs ``job``; ``quick`` starts Ray once (the vote job) to stay under 2 minutes."""
    if isinstance(job, VoteJob):
        return ["fedvote", "flower"]
    return ["fedvote", "pfl"] if quick else ["fedvote", "flower", "pfl", "fedvote-distributed"]


def command(framework: str, path: Path, threads: int, noise_seed: int) -> list[str] | None:
    here = ROOT / "benchmarks"
    tail = [str(path), "--threads", str(threads), "--noise-seed", str(noise_seed)]
    if framework == "fedvote":
        return [sys.executable, str(here / "peers_fedvote.py"), *tail]
    if framework == "fedvote-distributed":
        return [sys.executable, str(here / "peers_fedvote.py"), *tail, "--noise", "distributed"]
    if framework == "flower":
        return [sys.executable, str(here / "peers_flower.py"), str(path), "--threads", "1", "--noise-seed",
                str(noise_seed)]
    if framework == "pfl":
        return [str(PEERS_PYTHON), str(here / "peers_pfl.py"), *tail] if pfl_available() else None
    raise ValueError(framework)


def flower_available() -> bool:
    """Flower's simulation engine needs Ray (fedvote[simulation])."""
    probe = subprocess.run([sys.executable, "-c", "import flwr.simulation, ray"], capture_output=True)
    return probe.returncode == 0


def available(framework: str) -> bool:
    if framework == "pfl":
        return pfl_available()
    if framework == "flower":
        return flower_available()
    return True


def pfl_available() -> bool:
    if not PEERS_PYTHON.exists():
        return False
    probe = subprocess.run([str(PEERS_PYTHON), "-c", "import pfl"], capture_output=True)
    return probe.returncode == 0


def run_one(framework: str, path: Path, threads: int, noise_seed: int) -> dict[str, Any]:
    """One subprocess: its ``RESULT`` line and its wall time; a failed run is retried once (recorded)."""
    try:
        return run_once(framework, path, threads, noise_seed)
    except RuntimeError as error:
        print(f"  {framework} failed, retrying once: {str(error)[-600:]}", flush=True)
        result = run_once(framework, path, threads, noise_seed)
        result["retried_after"] = str(error)[-600:]
        return result


# The workers' OpenMP wait policy (--omp-wait-policy): PASSIVE unless the environment sets one.
# "unset" leaves it to OpenMP (libgomp spins a little, then sleeps): what ``fedvote run`` gets.
OMP_POLICY = {"policy": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


def run_once(framework: str, path: Path, threads: int, noise_seed: int) -> dict[str, Any]:
    """One subprocess: its ``RESULT`` line and its wall time."""
    argv = command(framework, path, threads, noise_seed)
    assert argv is not None
    per_process = "1" if framework == "flower" else str(threads)
    env = {**os.environ, "OMP_NUM_THREADS": per_process, "MKL_NUM_THREADS": per_process, "PYTHONWARNINGS": "ignore",
           # OpenMP's threads sleep when idle instead of spinning: on a shared 2-core machine, spinning
           # threads that lose their core make a 2-thread torch 10-60x slower (measured on the vote job).
           "OMP_WAIT_POLICY": OMP_POLICY["policy"]}
    if OMP_POLICY["policy"] == "unset":
        del env["OMP_WAIT_POLICY"]
    start = time.perf_counter()
    # A session of its own (its id is the worker's pid): Ray's processes (raylet, actors) join it.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                               start_new_session=True)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    lingering = wait_for_session(process.pid)
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"{framework} failed ({process.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["wall_s"] = wall
    result["lingering_s"] = lingering
    return result


def session_members(sid: int) -> list[int]:
    """Processes (pids) of session ``sid`` that are still running (not zombies)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session, ...
            members.append(int(stat.parent.name))
    return members


def wait_for_session(sid: int, timeout: float = 120.0) -> float:
    """Wait until the processes a run left in its session (Ray's, shutting down) are gone; seconds waited.

    Not part of the run's wall time; it keeps the next run from being measured beside them.
    """
    begin = time.perf_counter()
    while session_members(sid) and time.perf_counter() - begin < timeout:
        time.sleep(0.2)
    return time.perf_counter() - begin



def times(framework: str, result: dict[str, Any]) -> dict[str, float | None]:
    """wall, job, rounds and start-up seconds of one run, as the module docstring defines them."""
    if framework.startswith("fedvote"):
        rounds = result.get("method_s")
        outside = result.get("data_s", 0.0) + result.get("accounting_s", 0.0)  # the vote job accounts nothing
        return {"wall_s": result["wall_s"], "job_s": result["job_s"], "rounds_s": rounds,
                "startup_s": result["wall_s"] - result["job_s"], "work_s": result["job_s"] - outside}
    if framework == "flower":
        return {"wall_s": result["wall_s"], "job_s": result["job_s"], "rounds_s": result["job_s"],
                "startup_s": result["wall_s"] - result["job_s"], "work_s": result["job_s"]}
    job = result["setup_s"] + result["job_s"]  # pfl
    return {"wall_s": result["wall_s"], "job_s": job, "rounds_s": result["job_s"],
            "startup_s": result["wall_s"] - job, "work_s": result["job_s"]}


def measure_job(job: Job, path: Path, repeats: int, threads: int, quick: bool = False) -> list[dict[str, Any]]:
    """Every framework on ``job``, ``repeats`` times interleaved (order rotated), medians."""
    names = frameworks(job, quick)
    runnable = [n for n in names if available(n)]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(repeats):
        order = runnable[r % len(runnable):] + runnable[: r % len(runnable)]
        for framework in order:
            result = run_one(framework, path, threads, noise_seed=1 + r)
            runs[framework].append(result)
            print(f"  {job.name} [{r + 1}/{repeats}] {framework}: wall {result['wall_s']:.2f} s, "
                  f"job {times(framework, result)['job_s']:.2f} s, accuracy {result['accuracy']:.4f}", flush=True)
    rows = []
    for framework in names:
        row: dict[str, Any] = {"job": job.name, "framework": framework, "repeats": len(runs[framework])}
        if not runs[framework]:
            row["note"] = {"pfl": PFL_MISSING, "flower": RAY_MISSING}.get(framework, "not run")
            rows.append(row)
            continue
        per_run = [times(framework, result) for result in runs[framework]]
        for key in ("wall_s", "job_s", "rounds_s", "startup_s", "work_s"):
            values = [v for t in per_run if (v := t[key]) is not None]
            row[key] = statistics.median(values) if values else None
            row[key + "_all"] = values
        row["retries"] = sum("retried_after" in result for result in runs[framework])
        accuracies = [result["accuracy"] for result in runs[framework]]
        row["accuracy"] = statistics.fmean(accuracies)
        row["accuracy_all"] = accuracies
        first = runs[framework][0]
        if isinstance(job, FedAvgJob):
            if framework == "flower":
                row["epsilon"] = flower_epsilon(job)
                row["epsilon_source"] = "dp-accounting from the same σ, q, T (no Flower DP wrapper)"
            else:
                row["epsilon"] = first.get("epsilon")
                row["epsilon_source"] = first.get("epsilon_source")
            row["mean_sampled"] = statistics.fmean(result.get("mean_sampled", float("nan")) for result in runs[framework])
        else:
            row["epsilon_source"] = "same σ: fedvote's calibration (ε = 4 for the whole pate-fl run)"
        row["detail"] = {k: v for k, v in first.items() if k not in ("accuracy",)}
        if framework == "fedvote-distributed":
            row["note"] = "fedvote's default noise placement (secure-sum shares from all N agents each round)"
        if framework == "flower":
            row["note"] = "Ray start-up, actors and data loading are the start-up; 1 ClientApp per core"
        rows.append(row)
    base = next(row for row in rows if row["framework"] == "fedvote")
    for row in rows:
        if row["framework"] in ("flower", "pfl") and row.get("wall_s") is not None:
            for key in ("wall", "job", "rounds", "work"):
                mine, theirs = base.get(f"{key}_s"), row.get(f"{key}_s")
                row[f"speedup_{key}"] = theirs / mine if mine and theirs else None
    if isinstance(job, VoteJob):
        rows.append({"job": job.name, "framework": "pfl", "note": VOTE_NOT_IN_PFL})
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's bar, job by job, from the medians."""
    lines = []
    for job in dict.fromkeys(row["job"] for row in rows):
        mine = {row["framework"]: row for row in rows if row["job"] == job}
        base = mine["fedvote"]
        flower, pfl = mine.get("flower", {}), mine.get("pfl", {})
        parts = []
        if flower.get("speedup_wall"):
            readings = {"with start-up": flower["speedup_wall"], "without start-up": flower["speedup_job"]}
            text = (f"vs Flower {flower['speedup_wall']:.1f}x (wall, with start-up), "
                    f"{flower['speedup_job']:.1f}x (without start-up)")
            if flower.get("speedup_work"):
                readings["same work"] = flower["speedup_work"]
                text += f", {flower['speedup_work']:.1f}x (same work: rounds and evaluation, no data loading or ε)"
            met = [name for name, ratio in readings.items() if ratio >= 20]
            missed = [name for name, ratio in readings.items() if ratio < 20]
            verdict = "; ".join(([f"met {', '.join(met)}"] if met else []) + ([f"NOT met {', '.join(missed)}"] if missed else []))
            parts.append(f"{text} [bar >= 20x: {verdict}]")
        if pfl.get("speedup_wall"):
            met = "met" if min(pfl["speedup_wall"], pfl["speedup_job"], pfl["speedup_rounds"]) >= 1 else "NOT met"
            parts.append(f"vs pfl {pfl['speedup_wall']:.2f}x (wall), {pfl['speedup_job']:.2f}x (job), "
                         f"{pfl['speedup_rounds']:.2f}x (rounds alone) [bar >= 1x: {met}]")
        accuracy = [f"{name} {row['accuracy']:.3f}" for name, row in mine.items() if row.get("accuracy") is not None]
        epsilon = [f"{name} {row['epsilon']:.3f}" for name, row in mine.items() if row.get("epsilon") is not None]
        line = f"{job}: fedvote {'; '.join(parts)}; accuracy {', '.join(accuracy)}"
        if epsilon:
            line += f"; ε {', '.join(epsilon)}"
        lines.append(line)
        lines.append(f"{job}: where the time goes (first repeat, s) — " + profile(mine))
        del base
    return lines


def profile(rows: dict[str, dict[str, Any]]) -> str:
    """Each framework's job split into its parts, from the workers' own timings."""
    parts = []
    for name, row in rows.items():
        detail = row.get("detail") or {}
        if not detail:
            continue
        if name.startswith("fedvote"):
            pieces = [f"import {detail.get('import_s', 0):.1f}", f"data split {detail.get('data_s', 0):.2f}"]
            if detail.get("method_s") is not None:
                pieces += [f"rounds {detail['method_s']:.2f}", f"evaluation + ε accounting {detail['evaluation_s']:.2f}"]
                if detail.get("accounting_s") is not None:
                    pieces.append(f"of which ε accounting {detail['accounting_s']:.2f}")
            else:
                pieces.append(f"teachers + vote {detail['job_s'] - detail.get('data_s', 0):.2f}")
        elif name == "flower":
            pieces = [f"import {detail.get('import_s', 0):.1f}", f"Ray + actors + data {detail.get('startup_s', 0):.1f}",
                      f"rounds {detail.get('job_s', 0):.2f}"]
            if detail.get("round_s_median") is not None:
                pieces.append(f"median round {detail['round_s_median']:.3f}")
        else:
            pieces = [f"import {detail.get('import_s', 0):.1f}", f"set-up {detail.get('setup_s', 0):.2f} "
                      f"(accountant {detail.get('accounting_s', 0):.2f})", f"rounds {detail.get('job_s', 0):.2f}"]
        parts.append(f"{name}: " + ", ".join(pieces) + " s")
    return "; ".join(parts)


def resummarize(path: Path) -> None:
    """Rewrite the summary and notes of a results file from its rows (the same rules as a run)."""
    data = json.loads(path.read_text())
    keep = [line for line in data.get("summary", []) if line.startswith(("uptime", "skipped"))]
    uptimes = next((line for line in keep if line.startswith("uptime")), "")
    if "; after: " in uptimes:
        loaded = load_line(uptimes.split("; after: ")[0], uptimes.split("; after: ")[1].split("; benchmark")[0])
        keep += [loaded] if loaded else []
    data["summary"] = verdicts(data["results"]) + keep
    data["notes"] = NOTES
    path.write_text(json.dumps(data, indent=2) + "\n")


def load_line(before: str, after: str) -> str | None:
    """A warning when the 1-minute load average exceeded the machine's cores before or after the run."""
    cores = os.cpu_count() or 1
    loads = []
    for text in (before, after):
        try:
            loads.append(float(text.rsplit("load average:", 1)[1].split(",")[0]))
        except (IndexError, ValueError):
            continue
    if loads and max(loads) > cores:
        return (f"the machine was loaded by other work (1-minute load average {', '.join(f'{v:.1f}' for v in loads)} "
                f"on {cores} cores, before and after): absolute times are several times a quiet machine's; the "
                f"ratios come from interleaved repeats under the same load")
    return None


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per framework (median)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of fedvote and pfl")
    parser.add_argument("--quick", action="store_true", help="smoke run: T = 5, one repeat, two jobs, no results file")
    parser.add_argument("--jobs", default="", help="comma-separated job names (substrings; default: all)")
    parser.add_argument("--out", type=Path, default=None, help="results file (default benchmarks/results/peers.json)")
    parser.add_argument("--omp-wait-policy", choices=["PASSIVE", "ACTIVE", "unset"], default=None,
                        help="the workers' OMP_WAIT_POLICY (default: $OMP_WAIT_POLICY, else PASSIVE; "
                             "unset: OpenMP's own default, as fedvote run gets it)")
    parser.add_argument("--resummarize", type=Path, default=None,
                        help="only rewrite the summary and notes of this results file from its rows")
    args = parser.parse_args(argv)
    if args.omp_wait_policy is not None:
        OMP_POLICY["policy"] = args.omp_wait_policy
    if args.resummarize is not None:
        resummarize(args.resummarize)
        return 0
    data_dir = default_data_dir()
    jobs = JOBS
    if args.quick:
        jobs = [VoteJob("digits", 10), replace(FedAvgJob("digits", 50), rounds=5)]
    wanted = [w.strip() for w in args.jobs.split(",") if w.strip()]
    if wanted:
        jobs = [job for job in jobs if any(w in job.name for w in wanted)]
    skipped = []
    if data_dir is None or not (data_dir / "mnist").is_dir():
        skipped = [job.name for job in jobs if job.dataset == "mnist"]
        jobs = [job for job in jobs if job.dataset != "mnist"]
    repeats = 1 if args.quick else args.repeats
    load_before = uptime()
    print(load_before, flush=True)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fedvote-peers-") as scratch:
        for job in jobs:
            path = Path(scratch) / (job.name.replace(" ", "_").replace("=", "") + ".npz")
            export(job, data_dir, path)
            rows += measure_job(job, path, repeats, args.threads, args.quick)
    load_after = uptime()
    print_table(rows, COLUMNS)
    summary = verdicts(rows)
    summary.append(f"uptime before: {load_before}; after: {load_after}; benchmark wall {time.perf_counter() - started:.0f} s")
    loaded = load_line(load_before, load_after)
    if loaded:
        summary.append(loaded)
    if skipped:
        summary.append(f"skipped (no MNIST under $FEDVOTE_DATA): {', '.join(skipped)}")
    for line in summary:
        print(line)
    if args.quick and args.out is None:
        return 0
    write_results(
        "peers",
        title=title([job.kind for job in jobs], OMP_POLICY["policy"]),
        rows=rows,
        columns=COLUMNS,
        notes=NOTES,
        summary=summary,
        path=args.out,
    )
    return 0


def title(kinds: list[str], policy: str) -> str:
    """The results file's title: which jobs, and the workers' OpenMP wait policy."""
    names = {"vote": "the vote jobs", "dp-fedavg": "the DP-FedAvg jobs"}
    jobs = " and ".join(names[kind] for kind in dict.fromkeys(kinds))
    return f"fedvote vs Flower's simulation engine and pfl: {jobs}, OpenMP wait policy {policy}"


NOTES = """Differences between the jobs that could not be removed:
- Start-up: Flower's wall time includes Ray's start (a local cluster, its actors) and the ClientApps loading the job file; pfl's includes importing pfl and building its accountant; fedvote's the import of torch and fedvote. The job column removes these: Flower's job is its rounds after one warm-up round to every node; fedvote's job still builds its data split (data split in the profile lines) from sklearn's digits or the MNIST files while Flower and pfl read the split fedvote built; ε accounting is in fedvote's job (two PLD compositions, agent and instance level, in evaluation_s: in a fresh process most of it is building the two Gaussian PLDs, which dp-accounting did one grid point at a time (3.05 of fedvote's 4.57 s on the digits DP-FedAvg job under cProfile) and fedvote.privacy.gaussian_pld does as one array since 2026-11-26 (evaluation + ε accounting 1.27 -> 0.47 s); the 100-fold composition's truncation bounds and the ε walk over arrays since 2026-11-26 too (fedvote.privacy.pld_arrays; 0.62 -> 0.39 s in a fresh process on this machine, quiet, digits job); since 2026-11-27 the first composition's tail cut by cumulative sums and the add/remove pair composed on two threads (both levels 0.24 -> 0.18 s, A/B in the same minutes); cached within a process) and pfl's (one composition, its PLDPrivacyAccountant, accounting_s), not in Flower's (computed here). The same-work column removes these differences too: each job's rounds (or vote) and final evaluation, without its data loading and ε accounting (fedvote's timings.data_s and accounting_s; pfl's set-up).
- Threads: every worker runs with OMP_WAIT_POLICY=PASSIVE (unless set, or --omp-wait-policy says otherwise; the command line says which): with OpenMP's default spinning, fedvote's 2-thread batched teachers took 9-37 s instead of 1.1 s for the N=10 vote job while the machine's load average was 7-9.
- Flower under load: its in-memory grid silently drops a message whose node its state holds offline (send_and_receive then returns fewer replies, or none); the Flower worker checks that every message got its reply and the benchmark reruns a failed run once (counted in the row's retries).
- Parallelism: fedvote trains the sampled clients (and the teachers) as one batched computation with --threads torch threads; Flower runs one ClientApp per core (2 Ray actors, 1 thread each); pfl runs its users one after another in process with --threads torch threads.
- Randomness: the same seeds give the same partition, θ⁰ and teachers (vote job) in fedvote and Flower (Flower's ClientApps run fedvote's own fit_classifier / sgd_steps per agent). Flower's ServerApp draws the agents' sampling and the server's noise from the same seeded stream as fedvote (numpy's default_rng([noise seed, 0x6AD])), so their DP-FedAvg runs differ only in the local mini-batch order (Flower's clients seed it per round and agent) and agree closely in accuracy; the vote job's noise shares are drawn per agent by each framework. pfl draws its cohorts, mini-batches and noise (torch) itself. Each repeat uses another noise seed (1, 2, 3), the same for every framework; accuracies are means over the repeats.
- Sampling in pfl: Poisson sampling is a Binomial(N, q) cohort size with pfl's minimize_reuse user sampler (distinct users within a cohort, but users are cycled through a shuffled list, not drawn independently per round); pfl's accountant treats it as Poisson sampling at rate q.
- Noise placement: the ratios are against fedvote with --noise server (the trusted-server Gaussian that Flower's and pfl's central DP implement); fedvote's default distributed noise (every agent adds a share through the secure sum) is the extra row.
- The vote job is not run in pfl (see benchmarks/peers_pfl.py)."""


if __name__ == "__main__":
    sys.exit(main())
