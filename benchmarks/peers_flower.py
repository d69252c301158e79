"""Flower's side of benchmarks/bench_peers.py: one job under Flower's simulation engine (Ray).

``python benchmarks/peers_flower.py JOB.npz [--threads K]`` runs the job that
:func:`benchmarks.peers_jobs.export` wrote with ``flwr.simulation.run_simulation``: one
virtual SuperNode per agent, a ``ClientApp`` that trains on its own partition, a
``ServerApp`` (Message API) that does the server's side. Prints ``RESULT {json}``.

The agents' local work is the same code fedvote runs per agent (the ``sgd_steps`` of
DP-FedAvg, the ``fit_classifier`` of a teacher, from the same seeds), so what differs from
fedvote is the framework: messages, serialisation, Ray's actors, one agent at a time.

* Start-up (``startup_s``): ``run_simulation`` up to the end of a first message round to
  every node (each ClientApp loads the job file and replies with its partition id): Ray's
  start, the actors, the apps, the data. Not part of ``job_s``.
* ``vote``: one round: every node trains its teacher and replies with its one-hot votes on
  the Q queries plus N(0, σ²/N) from its own generator; the ServerApp sums and argmaxes.
* ``dp-fedavg``: T rounds; the ServerApp samples each agent with probability q (Poisson),
  sends θ_t and the step size to the sampled nodes, sums their clipped updates, adds
  N(0, σ²S²) and divides by q·N (fedvote's ``noise="server"``); θ_T is evaluated on the
  test set. Flower's DP wrappers (``DifferentialPrivacyServerSideFixedClipping``) are not
  used: they sample a fixed fraction and divide by the number of replies, another
  mechanism; ε is therefore computed by dp-accounting from the same σ, q, T (the
  orchestrator labels it so).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()

import numpy as np  # noqa: E402

if __package__ in (None, ""):  # run as a file: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

JOB_ENV = "FEDVOTE_PEERS_JOB"  # the job file (the ServerApp and every ClientApp read it)
OUT_ENV = "FEDVOTE_PEERS_OUT"  # where the ServerApp writes its result
THREADS_ENV = "FEDVOTE_PEERS_THREADS"
NOISE_SEED_ENV = "FEDVOTE_PEERS_NOISE_SEED"  # overrides the job's noise seed (the ServerApp sends it on)

client_app = ClientApp()
server_app = ServerApp()

_CACHE: dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]] = {}


def _job(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The job file, loaded once per process (a Ray actor keeps it between messages)."""
    if path not in _CACHE:
        from benchmarks.peers_jobs import load

        _CACHE[path] = load(Path(path))
    return _CACHE[path]


def _array(record: Any) -> np.ndarray:
    """The one array an ArrayRecord carries."""
    assert isinstance(record, ArrayRecord)
    return record.to_numpy_ndarrays()[0]


def _partition(arrays: dict[str, np.ndarray], agent: int) -> tuple[np.ndarray, np.ndarray]:
    start, stop = arrays["agent_offsets"][agent], arrays["agent_offsets"][agent + 1]
    return arrays["agent_x"][start:stop], arrays["agent_y"][start:stop]


def _model(settings: dict[str, Any], name: str) -> Any:
    from fedvote.models.zoo import build_model

    return build_model(name, tuple(settings["example_shape"]), settings["num_classes"])


@client_app.query()
def hello(message: Message, context: Context) -> Message:
    """Warm-up: load the job and answer this node's partition id."""
    import torch

    torch.set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
    _job(str(message.content["job"]["path"]))
    partition = int(context.node_config["partition-id"])
    return Message(RecordDict({"reply": ConfigRecord({"partition": partition})}), reply_to=message)


@client_app.train()
def train(message: Message, context: Context) -> Message:
    """A vote (teacher + noisy one-hot votes) or a DP-FedAvg update (E SGD steps, clipped)."""
    import torch

    config = message.content["job"]
    settings, arrays = _job(str(config["path"]))
    agent = int(context.node_config["partition-id"])
    x, y = _partition(arrays, agent)
    if settings["kind"] == "vote":
        from fedvote.models.config import TrainingConfig
        from fedvote.models.training import fit_classifier
        from fedvote.models.zoo import build_model

        seed = int(arrays["training_seeds"][agent])
        generator = torch.Generator().manual_seed(seed)
        teacher_config = TrainingConfig(**settings["teacher"])
        model = build_model(teacher_config.model, tuple(settings["example_shape"]), settings["num_classes"],
                            generator=generator)
        teacher = fit_classifier(model, x, y, teacher_config, generator).eval()
        with torch.no_grad():
            labels = teacher(torch.as_tensor(arrays["query_x"])).argmax(dim=1).numpy()  # (Q,)
        votes = np.eye(settings["num_classes"])[labels]  # (Q, C) one-hot
        rng = np.random.default_rng([int(config["noise_seed"]), agent])  # type: ignore[arg-type]
        released = votes + rng.normal(0.0, settings["noise_share_std"], size=votes.shape)
        return Message(RecordDict({"votes": ArrayRecord([released])}), reply_to=message)
    from fedvote.models.local_training import clip_to_norm, flat_parameters, load_flat_parameters, sgd_steps

    theta = _array(message.content["theta"])  # (d,) float32
    model = load_flat_parameters(_model(settings, settings["model"]), theta)
    generator = torch.Generator().manual_seed(int(config["seed"]))  # type: ignore[arg-type]
    sgd_steps(model, x, y, steps=settings["local_steps"], learning_rate=float(config["lr"]),  # type: ignore[arg-type]
              batch_size=settings["batch_size"], generator=generator)
    update = clip_to_norm(flat_parameters(model) - theta, settings["clip_norm"])  # (d,)
    return Message(RecordDict({"update": ArrayRecord([update])}), reply_to=message)


def _broadcast(grid: Grid, nodes: list[int], message_type: str, records: dict[str, Any]) -> list[Message]:
    messages = [Message(RecordDict(dict(records)), dst_node_id=node, message_type=message_type) for node in nodes]
    replies = list(grid.send_and_receive(messages))
    if len(replies) != len(messages):  # Flower drops a message to a node its state holds offline
        raise RuntimeError(f"{len(replies)} replies to {len(messages)} {message_type} messages")
    errors = [r.error for r in replies if r.has_error()]
    if errors:
        raise RuntimeError(f"a ClientApp failed: {errors[0]}")
    return replies


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """Warm-up round, then the job's rounds; writes the result to $FEDVOTE_PEERS_OUT."""
    import torch

    path = os.environ[JOB_ENV]
    settings, arrays = _job(path)
    noise_seed = int(os.environ.get(NOISE_SEED_ENV) or settings["noise_seed"])
    entered = time.perf_counter()
    nodes = sorted(grid.get_node_ids())
    job = ConfigRecord({"path": path, "noise_seed": noise_seed})
    replies = _broadcast(grid, nodes, "query", {"job": job})
    node_of = {int(r.content["reply"]["partition"]): r.metadata.src_node_id  # type: ignore[arg-type]
               for r in replies}  # agent -> node
    warm = time.perf_counter()
    result: dict[str, Any] = {"warmup_round_s": warm - entered}
    if settings["kind"] == "vote":
        votes = _broadcast(grid, nodes, "train", {"job": job})
        shape = (arrays["query_x"].shape[0], settings["num_classes"])  # (Q, C)
        released = [_array(r.content["votes"]) for r in votes]
        odd = [a.shape for a in released if a.shape != shape]
        if odd:
            raise RuntimeError(f"vote replies of shapes {odd}, expected {shape}")
        total = np.sum(released, axis=0)  # (Q, C)
        labels = np.argmax(total, axis=1)
        result["accuracy"] = float(np.mean(labels == arrays["query_y"]))
    else:
        n, q = settings["agents"], settings["sampling_rate"]
        theta = arrays["theta0"].copy()  # (d,)
        rng = np.random.default_rng([noise_seed, 0x6AD])
        sampled = []
        round_s = []
        for t in range(settings["rounds"]):
            start = time.perf_counter()
            chosen = np.flatnonzero(rng.random(n) < q)  # Poisson sampling
            sampled.append(len(chosen))
            lr = settings["learning_rate"] * settings["lr_decay"] ** t
            total = np.zeros_like(theta)  # (d,)
            if len(chosen):
                sent = [
                    Message(
                        RecordDict({"job": ConfigRecord({"path": path, "lr": lr, "seed": int(t * n + agent)}),
                                    "theta": ArrayRecord([theta])}),
                        dst_node_id=int(node_of[int(agent)]),
                        message_type="train",
                    )
                    for agent in chosen
                ]
                replies = list(grid.send_and_receive(sent))
                if len(replies) != len(sent):  # as in _broadcast
                    raise RuntimeError(f"{len(replies)} replies to {len(sent)} train messages in round {t}")
                if any(r.has_error() for r in replies):
                    raise RuntimeError(f"a ClientApp failed: {replies[0].error}")
                total = np.sum([_array(r.content["update"]) for r in replies], axis=0)  # (d,)
            noise = rng.normal(0.0, settings["sigma"] * settings["clip_norm"], size=theta.shape)
            theta = (theta + (total + noise) / (q * n)).astype(np.float32)
            round_s.append(time.perf_counter() - start)
        model = _model(settings, settings["model"])
        from fedvote.models.local_training import load_flat_parameters

        load_flat_parameters(model, theta)
        with torch.no_grad():
            predicted = model(torch.as_tensor(arrays["test_x"])).argmax(dim=1).numpy()
        result["accuracy"] = float(np.mean(predicted == arrays["test_y"]))
        result["mean_sampled"] = float(np.mean(sampled))
        result["round_s_median"] = float(np.median(round_s))
    result["job_s"] = time.perf_counter() - warm
    result["server_entered"] = entered
    Path(os.environ[OUT_ENV]).write_text(json.dumps(result))


def run(job: Path, threads: int, noise_seed: int | None = None) -> dict[str, Any]:
    """Run the job under the simulation engine; its result with the start-up split out."""
    import tempfile

    from flwr.simulation import run_simulation

    settings = json.loads(str(np.load(job)["settings"]))
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    os.environ[JOB_ENV] = str(job.resolve())
    os.environ[THREADS_ENV] = str(threads)
    os.environ[NOISE_SEED_ENV] = "" if noise_seed is None else str(noise_seed)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ[OUT_ENV] = str(Path(scratch) / "result.json")
        import_s = time.perf_counter() - STARTED
        start = time.perf_counter()
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=settings["agents"],
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                            "init_args": {"num_cpus": os.cpu_count() or 1, "logging_level": "error",
                                          "log_to_driver": False}},
        )
        simulation_s = time.perf_counter() - start
        result: dict[str, Any] = json.loads(Path(os.environ[OUT_ENV]).read_text())
    entered = result.pop("server_entered")
    result["startup_s"] = entered - start + result["warmup_round_s"]
    result.update(import_s=import_s, simulation_s=simulation_s)
    return result


def cli(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("job", type=Path)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each ClientApp (one per core)")
    parser.add_argument("--noise-seed", type=int, default=None, help="override the job's noise seed")
    args = parser.parse_args(argv)
    import flwr
    import torch

    torch.set_num_threads(args.threads)
    # The ClientApp and ServerApp by their module's name, so that Ray's actors import them.
    from benchmarks import peers_flower

    result = peers_flower.run(args.job, args.threads, args.noise_seed)
    result.update(flwr=flwr.__version__, torch=torch.__version__)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
