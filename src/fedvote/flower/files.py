"""Files a Flower deployment reads: one per agent, one for the server.

``fedvote deploy split`` builds the federation a config describes (exactly as
``fedvote run`` does) and writes

* ``agent-<i>.npz`` — agent i's private records, its copy of the public pool (queries
  travel as indices into it), its teacher seed and, only when the config asks for a
  reproducible simulation (``privacy.noise_seed``), the seed of its noise stream;
* ``server.npz`` — the public pool, the test set, the agents' record counts (public
  metadata), the pool's labels, used only to *measure* pseudo-label accuracy, and the
  ledger's key and 64-bit hashes of the agents' records (so the server's ledger binds
  by record; they permit membership tests on those records);
* ``run.json`` — the config itself.

When the run sees its records through public input features (``--input-features``; ``auto``
on CIFAR-10 and Fashion-MNIST, :func:`fedvote.runner.input_features_kind`), the split does
the server's part as ``fedvote run`` does: it fits φ on the public pool alone
(:class:`~fedvote.models.input_features.InputMap`) and writes the pool and the test set seen
through it; every agent's file holds its *raw* records, that pool, and φ itself (plain
arrays), and the agent maps its own records through φ when it loads them. So a deployment
plans, trains and votes on what the in-process run does, at the ε it states (φ is a function
of public data: ``docs/privacy.md``).

Every file carries the federation's fingerprint, so a node started with another
federation's file is refused.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fedvote.aggregation.voting import noise_share_std
from fedvote.config import RunConfig
from fedvote.data.federation import Federation, LabeledData, PublicMetadata, ServerData
from fedvote.data.record_hashes import sorted_hashes_of
from fedvote.errors import ConfigError
from fedvote.flower.secagg import check_secagg_plan, secagg_settings
from fedvote.models.input_features import InputMap, fit_input_map
from fedvote.progress import NO_PROGRESS, Progress
from fedvote.results import write_atomic
from fedvote.runner import (
    federation_content_key,
    federation_fingerprint,
    input_features_kind,
    make_federation,
    plan,
)
from fedvote.transport.base import agent_training_seeds

if TYPE_CHECKING:
    from fedvote.methods.base import Method
    from fedvote.methods.voting import VotingSettings

    class FlowerMethod(Method, VotingSettings):
        """A method Flower runs: a method with a voting method's settings."""

AGENT_FILE = "agent-{agent_id}.npz"
SERVER_FILE = "server.npz"
CONFIG_FILE = "run.json"
_SPLIT_FILE = re.compile(r"agent-[0-9]+\.npz|server\.npz|run\.json")  # what a split writes


@dataclass(frozen=True, eq=False)
class AgentFile:
    """What one agent's node holds: its records, the public pool (P, *shape), its seeds.

    ``data`` is the agent's records as it trains on them: seen through ``input_features``
    (the φ its file ships, applied when the file is loaded) or as dealt (``"none"``).
    """

    agent_id: int
    num_agents: int
    data: LabeledData
    public_features: np.ndarray
    num_classes: int
    seed: int
    noise_seed: int | None
    fingerprint: str
    input_features: str = "none"


@dataclass(frozen=True, eq=False)
class ServerFile:
    """What the server holds: the public pool, the test set, the agents' record counts."""

    server: ServerData
    agent_records: np.ndarray
    public_labels: np.ndarray | None
    fingerprint: str
    # The ledger's key for these agents' records (:func:`fedvote.privacy.run_ledger.federation_content_key`),
    # computed by ``fedvote deploy`` when it dealt the data; None in files written before it.
    ledger_key: str | None = None
    # The sorted 64-bit hashes of the agents' records' features, so that the server's ledger
    # binds by record (:func:`fedvote.data.record_hashes.sorted_hashes_of`); they permit
    # membership tests on the agents' records. None in files written before them.
    record_hashes: np.ndarray | None = None
    # The input features the pool and the test set are seen through ("none": as dealt).
    input_features: str = "none"

    def public_metadata(self, num_agents: int) -> PublicMetadata:
        """What the server plans the method from: pool size, N, classes, shape, record counts."""
        return PublicMetadata(
            pool_size=int(self.server.public_features.shape[0]),
            num_agents=num_agents,
            num_classes=self.server.num_classes,
            example_shape=tuple(self.server.example_shape),
            agent_records=tuple(int(n) for n in self.agent_records),
        )


def check_split(config: RunConfig, out_dir: str | Path) -> None:
    """Refuse, before the federation is built, a split that could not be deployed or would mix.

    The config's method must be one Flower runs (:func:`flower_methods`), with at least 2 agents
    (:class:`~fedvote.flower.transport.FlowerTransport` needs them), and ``out_dir`` must
    hold no files of an earlier split (``agent-<i>.npz``, ``server.npz``, ``run.json``): a
    3-agent split over a 5-agent one would leave ``agent-3.npz`` and ``agent-4.npz`` of
    another federation, which start like any other. Nothing is removed: those files may sit
    beside an agent's ledger, and which to keep is the user's choice.
    """
    from fedvote.methods import METHODS

    if config.method not in METHODS or not METHODS[config.method].flower_support:
        raise ConfigError(
            "config",
            f"the config's method is {config.method}; Flower runs {' or '.join(flower_methods())}",
        )
    if config.federation.agents < 2:  # the transport refuses it when the server starts: refuse it here
        agents = config.federation.agents
        raise ConfigError("agents", f"a Flower federation needs at least 2 agents, got {agents}")
    out = Path(out_dir)
    if out.is_dir():
        earlier = sorted(path.name for path in out.iterdir() if _SPLIT_FILE.fullmatch(path.name))
        if earlier:
            raise ConfigError(
                "out",
                f"{out} holds the files of an earlier split ({', '.join(earlier)}); a new split would "
                "mix with them: split into a new directory, or remove them first",
            )


def write_deployment_files(
    config: RunConfig, out_dir: str | Path, progress: Progress = NO_PROGRESS
) -> list[Path]:
    """Build ``config``'s federation and write one file per agent, the server's, and the config.

    Refused first (nothing built or written) as :func:`check_split` refuses.
    """
    out = Path(out_dir)
    check_split(config, out)
    federation = make_federation(config)  # refused (e.g. a target holding agents' records): nothing written
    kind = input_features_kind(config)
    public, test, shipped = federation.public.features, federation.test.features, {}
    if kind != "none":  # the server's part: φ fitted on the pool alone, the pool and test set mapped
        size = len(federation.public) + len(federation.test)
        with progress.step(f"input features ({kind}, fitted on the public pool)", total=size) as bar:
            pool = federation.public.features
            input_map, public = fit_input_map(kind, pool, seed=config.seed, advance=bar.advance)
            test, shipped = input_map.apply(federation.test.features, bar.advance), input_map.to_arrays()
    out.mkdir(parents=True, exist_ok=True)
    with progress.step("writing the agents' and the server's files", total=federation.num_agents + 1) as bar:
        written = _write_files(config, federation, out, (public, test, kind, shipped), bar.advance)
    written.append(write_atomic(out / CONFIG_FILE, json.dumps(config.to_dict(), indent=2) + "\n"))
    return written


def _write_files(
    config: RunConfig,
    federation: Federation,
    out: Path,
    seen: tuple[np.ndarray, np.ndarray, str, dict[str, np.ndarray]],
    advance: Callable[[int], None],
) -> list[Path]:
    """Each agent's file (its raw records, the pool as the server sees it, φ) and the server's.

    ``seen`` is the pool and the test set as the server sees them, their input features' kind
    and the φ arrays shipped to every agent (none for ``"none"``).
    """
    public, test, kind, shipped = seen
    fingerprint = federation_fingerprint(config)
    seeds = agent_training_seeds(config.seed, federation.num_agents)
    noise_seed = config.privacy.noise_seed
    written = []
    for i, data in enumerate(federation.agents):
        path = _write_npz(
            out / AGENT_FILE.format(agent_id=i),
            features=data.features,  # as dealt: the agent applies φ itself
            labels=data.labels,
            public=public,
            num_classes=federation.num_classes,
            agent_id=i,
            num_agents=federation.num_agents,
            seed=seeds[i],
            noise_seed="" if noise_seed is None else str(noise_seed),
            fingerprint=fingerprint,
            **shipped,
        )
        written.append(path)
        advance(1)
    path = _write_npz(
        out / SERVER_FILE,
        public=public,
        public_labels=federation.public.labels,
        test_features=test,
        test_labels=federation.test.labels,
        num_classes=federation.num_classes,
        agent_records=federation.agent_sizes(),
        fingerprint=fingerprint,
        ledger_key=federation_content_key(federation),
        record_hashes=sorted_hashes_of(agent.features for agent in federation.agents),
        input_features=kind,
        pool_class_prior=np.asarray(federation.pool_class_prior or (), dtype=np.float64),  # (C,) or (0,)
    )
    written.append(path)
    advance(1)
    return written


def _pool_class_prior(
    archive: np.lib.npyio.NpzFile, classes: int, path: str | Path
) -> tuple[float, ...] | None:
    """The server file's documented pool prior (C shares summing to 1); None when it has none."""
    if "pool_class_prior" not in archive.files:
        return None
    prior = np.asarray(archive["pool_class_prior"], dtype=np.float64).reshape(-1)
    if prior.size == 0:
        return None
    shares = prior.size == classes and bool(np.all(np.isfinite(prior))) and prior.min() >= 0
    if not shares or abs(prior.sum() - 1.0) > 1e-9:
        raise ConfigError("data", f"{path}: pool_class_prior must be {classes} shares summing to 1")
    return tuple(float(share) for share in prior)


def _write_npz(path: Path, **arrays: Any) -> Path:
    """``np.savez_compressed(path, **arrays)``, written atomically (:func:`~fedvote.results.write_atomic`)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return write_atomic(path, buffer.getvalue())


def map_agent_records(input_map: InputMap, features: np.ndarray) -> np.ndarray:
    """An agent's raw records (n, *shape) seen through its file's φ: (n, d) float32.

    The fitted map and the one rebuilt from a file's arrays are the same arithmetic on the same
    float32 buffers and give equal outputs; what makes the mapping slow in a ClientApp is the
    process's threads (:mod:`fedvote.flower.app` sets fedvote's host policy before torch loads).
    """
    return input_map.apply(np.ascontiguousarray(features, dtype=np.float32))


def load_agent_file(
    path: str | Path, *, map_records: Callable[[InputMap, np.ndarray], np.ndarray] | None = None
) -> AgentFile:
    """Read ``agent-<i>.npz``; one clear error if it is missing or not an agent file.

    ``map_records`` maps the raw records through the file's φ (default :func:`map_agent_records`;
    :func:`fedvote.flower.agent_cache.cached_agent_file` passes one that maps a content once).
    """
    with _open(path, "agent") as archive:
        noise_seed = str(archive["noise_seed"])
        try:
            input_map = InputMap.from_arrays(archive)
        except ConfigError as error:  # the file is what the user can change (deploy agent --data)
            raise ConfigError("data", f"{path}: its input map {error.detail}") from None
        features = np.asarray(archive["features"], dtype=np.float32)
        if input_map is not None:  # the agent sees its own records through the shipped φ
            features = (map_records or map_agent_records)(input_map, features)
        return AgentFile(
            agent_id=int(archive["agent_id"]),
            num_agents=int(archive["num_agents"]),
            data=LabeledData(features=features, labels=np.asarray(archive["labels"], dtype=np.int64)),
            public_features=np.asarray(archive["public"], dtype=np.float32),
            num_classes=int(archive["num_classes"]),
            seed=int(archive["seed"]),
            noise_seed=int(noise_seed) if noise_seed else None,
            fingerprint=str(archive["fingerprint"]),
            input_features="none" if input_map is None else input_map.kind,
        )


def load_server_file(path: str | Path) -> ServerFile:
    """Read ``server.npz``; one clear error if it is missing or not a server file."""
    with _open(path, "server") as archive:
        public = np.asarray(archive["public"], dtype=np.float32)
        test = LabeledData(
            features=np.asarray(archive["test_features"], dtype=np.float32),
            labels=np.asarray(archive["test_labels"], dtype=np.int64),
        )
        labels = archive["public_labels"] if "public_labels" in archive.files else None
        num_classes = int(archive["num_classes"])
        return ServerFile(
            server=ServerData(
                public_features=public,
                test=test,
                num_classes=num_classes,
                example_shape=tuple(int(s) for s in public.shape[1:]),
                pool_class_prior=_pool_class_prior(archive, num_classes, path),
            ),
            agent_records=np.asarray(archive["agent_records"], dtype=np.int64),
            public_labels=None if labels is None else np.asarray(labels, dtype=np.int64),
            fingerprint=str(archive["fingerprint"]),
            ledger_key=str(archive["ledger_key"]) if "ledger_key" in archive.files else None,
            record_hashes=(
                np.asarray(archive["record_hashes"], dtype=np.uint64)
                if "record_hashes" in archive.files
                else None
            ),
            input_features=str(archive["input_features"]) if "input_features" in archive.files else "none",
        )


def planned_method(
    config: RunConfig, files: ServerFile, *, clip_sigmas: float, query_batch_size: int = 0
) -> FlowerMethod:
    """The voting method a Flower run of ``config`` executes, its SecAgg+ plan checked.

    Built from the server's file alone, as the ServerApp builds it (σ given or
    calibrated; ``query_batch_size`` > 0 sets the queries per SecAgg+ round). Refuses a
    file of another federation, a method Flower does not run (one that does not declare
    :attr:`~fedvote.methods.base.Method.flower_support`), a label-only release, and a
    clipping range whose δ slack could exceed 1 % of δ
    (:func:`~.flower_secagg.check_secagg_plan`) — before anything is trained, released or charged.
    """
    from fedvote.transport.capabilities import LabelRelease

    if query_batch_size < 0:
        message = f"must be >= 0 (0: the method's default), got {query_batch_size}"
        raise ConfigError("query_batch_size", message)
    if files.fingerprint != federation_fingerprint(config):
        raise ConfigError("data", "the server file and the config are of two splits: give one split's")
    wanted = input_features_kind(config)
    if files.input_features != wanted:
        raise ConfigError(
            "data",
            f"the server file's pool is seen through input features {files.input_features!r} but the "
            f"config runs on {wanted!r}: split the data again with this config",
        )
    planned = plan(config, files.public_metadata(config.federation.agents))
    if not planned.flower_support:
        message = f"the config's method is {config.method}; Flower runs {' or '.join(flower_methods())}"
        raise ConfigError("config", message)
    if LabelRelease in planned.requirements():
        raise ConfigError(
            "config",
            "options.release: Flower releases the SecAgg+ vote sums; label release (Confident-GNMax) runs "
            "in process only: drop the release option (or make it sums)",
        )
    if query_batch_size > 0:  # queries per SecAgg+ round: a deployment setting (a voting method's field)
        planned = dataclasses.replace(cast(Any, planned), query_batch_size=query_batch_size)
    method = cast("FlowerMethod", planned)  # a method declaring flower_support is a voting method
    t = method.min_responders
    settings = secagg_settings(
        noise_share_std(method.sigma, t),
        config.federation.agents,
        t,
        clip_sigmas=clip_sigmas,
        integer=config.privacy.secure_noise,
    )
    check_secagg_plan(
        method.planned_events(),
        queries=method.queries,
        settings=settings,
        num_classes=files.server.num_classes,
        delta=config.privacy.delta,
        accountant=config.privacy.accountant,
    )
    return method


def deployed_config(config: RunConfig, *, secure_noise: bool) -> RunConfig:
    """``config`` as ``fedvote deploy`` runs it: with ``--secure-noise`` (its default) or without.

    Secure noise cannot be seeded: a config with ``noise_seed`` (a reproducible simulation)
    is refused under it, naming the flag that turns it off. The method must be on the
    secure path (:func:`~fedvote.methods.registry.check_secure_noise`), and on Flower
    Private-kNN-FL's counts and weighted votes are not yet (the SecAgg+ clip is one-hot's).
    """
    from fedvote.methods.registry import check_secure_noise

    if secure_noise and config.privacy.noise_seed is not None:
        raise ConfigError(
            "secure_noise",
            "is fedvote deploy's default and cannot be seeded, but the config sets noise_seed: "
            "drop it, or pass --no-secure-noise for a seeded simulation",
        )
    from fedvote.methods import METHODS

    refusal = METHODS[config.method].flower_secure_noise_refusal if config.method in METHODS else None
    if secure_noise and refusal is not None:  # Method.flower_secure_noise_refusal
        raise ConfigError("secure_noise", f"does not apply to {config.method} on Flower: {refusal}")
    privacy = dataclasses.replace(config.privacy, secure_noise=secure_noise)
    deployed = dataclasses.replace(config, privacy=privacy)
    check_secure_noise(deployed)
    return deployed


def config_key(argument: str) -> str:
    """Where the setting a refusal names (``agents``) lives in a run config: ``federation.agents``.

    ``fedvote deploy`` commands read their run from a config file, not from flags: a refusal of a
    setting names the config and this key. An argument that is no config field comes back as it is.
    """
    from fedvote.config import FederationConfig, PrivacyConfig

    name = {"num_agents": "agents"}.get(argument, argument)
    for section, fields in (("federation", FederationConfig), ("privacy", PrivacyConfig)):
        if name in {field.name for field in dataclasses.fields(fields)}:
            return f"{section}.{name}"
    return name


def flower_methods() -> list[str]:
    """The methods Flower runs (declaring :attr:`~fedvote.methods.base.Method.flower_support`), sorted."""
    from fedvote.methods import METHODS

    return sorted(name for name, method in METHODS.items() if method.flower_support)


class _open:
    """``np.load`` of an npz that must hold fedvote's keys for ``role``; closes the file."""

    _KEYS = {
        "agent": {"features", "labels", "public", "agent_id", "seed", "fingerprint"},
        "server": {"public", "test_features", "test_labels", "agent_records", "fingerprint"},
    }
    _NAMES = {
        "agent": f"an agent's file ({AGENT_FILE.format(agent_id='<i>')} from fedvote deploy split)",
        "server": f"the server's file ({SERVER_FILE} from fedvote deploy split)",
    }

    def __init__(self, path: str | Path, role: str) -> None:
        self._path = Path(path)
        self._role = role
        self._archive: np.lib.npyio.NpzFile | None = None

    def __enter__(self) -> np.lib.npyio.NpzFile:
        if not self._path.is_file():
            raise ConfigError("data", f"no {self._role} file at {self._path}")
        try:
            archive = np.load(self._path, allow_pickle=False)
        except Exception as error:  # noqa: BLE001 - empty (EOFError), zip and format errors alike
            raise ConfigError("data", f"cannot read {self._path}: {' '.join(str(error).split())}") from error
        missing = self._KEYS[self._role] - set(archive.files)
        if missing:
            other = next((role for role, keys in self._KEYS.items() if keys <= set(archive.files)), None)
            archive.close()
            if other is not None:  # the other role's file: say which one it is and what is wanted
                raise ConfigError(
                    "data",
                    f"{self._path} is no fedvote {self._role} file: it is {self._NAMES[other]}; "
                    f"give {self._NAMES[self._role]}",
                )
            raise ConfigError(
                "data", f"{self._path} is no fedvote {self._role} file (missing {', '.join(sorted(missing))})"
            )
        self._archive = archive
        return archive

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        """Close the archive; a member that cannot be read (a bad CRC, a damaged stream) is one line.

        ``np.load`` of an npz reads its members lazily, inside the ``with`` block: a zip that
        opens but holds a damaged member fails there (``BadZipFile``, ``zlib.error``, a bad
        header's ``ValueError``), and is refused as ``data`` like a file that does not open.
        """
        if self._archive is not None:
            self._archive.close()
        if isinstance(error, Exception) and not isinstance(error, ConfigError):
            reason = " ".join(str(error).split()) or type(error).__name__
            raise ConfigError("data", f"cannot read {self._path}: {reason}") from error
