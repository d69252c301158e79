"""Issue 42, defect 1: the public pool and the test set hold none of the agents' records, by content.

A check by name or path lets through a byte copy of the agents' file given as ``--target``
under another name: every public-pool point is then an agent's record, the server queries
and trains on them in the clear, and the run reports a finite ε (the truth: unbounded).
Every federation is now checked by its records' features
(:mod:`fedvote.data.public_pool_check`), after the per-record maps both sides get, and
every command that builds one is refused with one line naming ``--target`` and the count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import fedvote.runner as runner
from fedvote.config import FederationConfig, RunConfig
from fedvote.data.datasets import load_dataset, resize_images
from fedvote.data.federation import build_domain_federation
from fedvote.data.public_pool_check import refuse_agents_records_in_public, shared_records_by_part
from fedvote.data.record_hashes import sorted_record_hashes
from fedvote.errors import ConfigError

SAMPLES = Path(__file__).resolve().parent / "samples"
RECORDS = 240  # digits records in the agents' file: small enough for a refused-or-not run to be quick
# Tiny and fast, as tests/cli/test_hardening_paths.py: σ given, the exact accountant, logistic models.
TINY = ["--agents", "4", "--epochs", "1", "--teacher-model", "logistic", "--noise-seed", "1",
        "--sigma", "5", "--accountant", "exact"]
REFUSAL = re.compile(
    r"fedvote: error: (?:--target|--config: \S+: federation\.target): "  # deploy split names the config's key
    r"the public pool and test set hold ([\d,]+) of the agents' records "
    r"\(by content: ([\d,]+) in the public pool, ([\d,]+) in the test set\); "
)


def digits_arrays(count: int = RECORDS) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` bundled digits: (count, 1, 8, 8) float32 in [0, 1] and their labels."""
    digits = load_dataset("digits")
    return digits.features[:count], digits.labels[:count]


@pytest.fixture
def agents_file(tmp_path: Path) -> Path:
    """The agents' records as an npz (x, y)."""
    x, y = digits_arrays()
    np.savez(tmp_path / "agents.npz", x=x, y=y)
    return tmp_path / "agents.npz"


@pytest.fixture
def byte_copy(agents_file: Path) -> Path:
    """The agents' npz, byte for byte, under another name."""
    return Path(shutil.copyfile(agents_file, agents_file.with_name("public-copy.npz")))


def write_csv(path: Path, features: np.ndarray, labels: np.ndarray) -> Path:
    """A csv with a header row, one record per row (features flattened, exact float32 values)."""
    flat = features.reshape(len(features), -1)
    header = ",".join([f"f{i}" for i in range(flat.shape[1])] + ["label"])
    rows = [
        ",".join([*(repr(float(v)) for v in row), str(int(label))])
        for row, label in zip(flat, labels, strict=True)
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def config(dataset: str, target: str | None, data_dir: Path | None = None, agents: int = 4) -> RunConfig:
    directory = str(data_dir) if data_dir is not None else None
    return RunConfig(federation=FederationConfig(dataset=dataset, target=target, data_dir=directory, agents=agents))


def error_line(err: str) -> str:
    """The one error line of ``err``: the last line, and no other says error (progress lines may precede it)."""
    lines = err.strip().splitlines()
    errors = [line for line in lines if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    return errors[0]


def refused_count(err: str) -> int:
    """The shared-record count of the one refusal line in ``err`` (pool + test set add up to it)."""
    match = REFUSAL.match(error_line(err))
    assert match is not None, err
    total, pool, test = (int(group.replace(",", "")) for group in match.groups())
    assert total == pool + test
    return total


# ------------------------------------------------------------------ the check, where federations are built


def test_a_byte_copy_of_the_agents_file_as_target_is_refused(agents_file, byte_copy):
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"npz:{agents_file}", f"npz:{byte_copy}"))
    assert error.value.argument == "target"
    # Every record the agents hold is in the pool or the test set; all of them are counted.
    assert error.value.detail.startswith(f"the public pool and test set hold {RECORDS:,} of the agents' records")
    assert "\n" not in error.value.detail


def test_a_csv_copy_of_the_agents_csv_as_target_is_refused(tmp_path):
    x, y = digits_arrays()
    agents = write_csv(tmp_path / "agents.csv", x, y)
    copy = Path(shutil.copyfile(agents, tmp_path / "public.csv"))
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"csv:{agents}", f"csv:{copy}"))
    assert error.value.argument == "target" and f"hold {RECORDS:,} of the agents' records" in error.value.detail


def test_a_csv_rendering_of_the_agents_npz_is_the_same_records(tmp_path):
    # The loaders differ, the records do not: hashes are of float32 features, whatever file held them.
    x, y = digits_arrays()
    np.savez(tmp_path / "agents.npz", x=x.reshape(len(x), -1), y=y)
    csv = write_csv(tmp_path / "public.csv", x, y)
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"npz:{tmp_path / 'agents.npz'}", f"csv:{csv}"))
    assert error.value.argument == "target" and f"hold {RECORDS:,} of" in error.value.detail


def test_the_same_features_under_other_labels_are_still_the_agents_records(agents_file, tmp_path):
    x, y = digits_arrays()
    relabelled = tmp_path / "relabelled.npz"
    np.savez(relabelled, x=x, y=(y + 1) % 10)
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"npz:{agents_file}", f"npz:{relabelled}"))
    assert f"hold {RECORDS:,} of the agents' records" in error.value.detail


def test_a_target_holding_a_few_of_the_agents_records_is_refused_with_their_count(agents_file, tmp_path):
    x, y = digits_arrays()
    others, other_labels = load_dataset("digits").features[1000:1300], load_dataset("digits").labels[1000:1300]
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, x=np.concatenate([others, x[:7]]), y=np.concatenate([other_labels, y[:7]]))
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"npz:{agents_file}", f"npz:{mixed}"))
    assert error.value.argument == "target"
    assert error.value.detail.startswith("the public pool and test set hold 7 of the agents' records")


def test_a_copy_already_brought_to_the_target_size_is_refused(tmp_path):
    # The agents hold 28x28 MNIST digits; the target is the same digits, resized beforehand to
    # 16x16 as fedvote resizes. Without framing the agents' records are resampled to the
    # target's 16x16 before the comparison (what the server would see), so they meet their copies.
    mnist = load_dataset("mnist", SAMPLES)
    np.savez(tmp_path / "agents.npz", x=mnist.features, y=mnist.labels)
    np.savez(tmp_path / "small.npz", x=resize_images(mnist.features, (16, 16)), y=mnist.labels)
    resized = config(f"npz:{tmp_path / 'agents.npz'}", f"npz:{tmp_path / 'small.npz'}")
    resized = dataclasses.replace(resized, federation=dataclasses.replace(resized.federation, framing="none"))
    with pytest.raises(ConfigError) as error:
        runner.make_federation(resized)
    assert error.value.argument == "target" and f"hold {len(mnist):,} of" in error.value.detail


def test_a_target_whose_official_test_part_holds_the_agents_records_is_refused(agents_file, tmp_path):
    # The target's x is other data; its x_test (the whole test set) is a copy of 50 agents' records.
    x, y = digits_arrays()
    digits = load_dataset("digits")
    target = tmp_path / "target.npz"
    np.savez(target, x=digits.features[1000:1300], y=digits.labels[1000:1300], x_test=x[:50], y_test=y[:50])
    with pytest.raises(ConfigError) as error:
        runner.make_federation(config(f"npz:{agents_file}", f"npz:{target}"))
    assert error.value.argument == "target"
    assert error.value.detail.startswith(
        "the public pool and test set hold 50 of the agents' records (by content: 0 in the public pool, "
        "50 in the test set)"
    )


def test_build_domain_federation_refuses_a_renamed_copy_of_a_source():
    mnist = load_dataset("mnist", SAMPLES)
    renamed = load_dataset("usps", SAMPLES)
    renamed = type(renamed)(
        name="usps", features=mnist.features, labels=mnist.labels, class_names=mnist.class_names
    )  # the name says usps, the records are MNIST's
    with pytest.raises(ConfigError) as error:
        build_domain_federation([mnist], renamed, num_agents=4)
    assert error.value.argument == "target"


@pytest.mark.parametrize(
    ("dataset", "target"),
    [("digits", None), ("mnist", None), ("usps", None), ("mnist", "usps"), ("usps", "mnist"),
     ("mnist,digits", "usps"), ("multidigit", None)],
)
def test_federations_of_distinct_records_are_dealt_as_before(dataset, target):
    # The default runs and the domain-shift runs share no record: nothing is refused, and the
    # check draws nothing from the dealing's generator (fixed-seed federations are unchanged).
    federation = runner.make_federation(config(dataset, target, SAMPLES if dataset != "digits" else None, 5))
    counts = shared_records_by_part(
        [agent.features for agent in federation.agents],
        {"pool": federation.public.features, "test": federation.test.features},
    )
    assert counts == {"pool": 0, "test": 0}


def test_a_federation_dealt_by_a_fixed_seed_is_unchanged_by_the_check():
    # Pinned: digits' default dealing (5 agents, seed 0), every part's features and labels in
    # order, as HEAD dealt it before the check (a433435): the check changes no record and no draw.
    federation = runner.make_federation(config("digits", None, agents=5))
    assert [len(agent) for agent in federation.agents] == [252, 252, 251, 251, 251]
    digest = hashlib.sha256()
    for part in [*federation.agents, federation.public, federation.test]:
        digest.update(np.ascontiguousarray(part.features).tobytes())
        digest.update(np.asarray(part.labels, dtype=np.int64).tobytes())
    assert digest.hexdigest()[:32] == "934749165cedf9cbcb61c64ad3ac866d"


def test_blank_records_are_no_ones_and_are_not_counted():
    # multidigit's train and test grids come from disjoint source images, yet both hold the
    # empty grid (all four cells blank, 1 in 16): it is everyone's, and refuses nothing.
    x, _ = digits_arrays(20)
    blank = np.zeros((3, *x.shape[1:]), dtype=np.float32)
    agents, public = np.concatenate([x[:10], blank]), np.concatenate([x[10:], blank, np.ones_like(blank)])
    assert shared_records_by_part([agents], {"pool": public}) == {"pool": 0}
    assert shared_records_by_part([agents], {"pool": np.concatenate([public, x[:2]])}) == {"pool": 2}


def test_the_refusal_counts_records_of_each_public_part():
    x, _ = digits_arrays(20)
    with pytest.raises(ConfigError) as error:
        refuse_agents_records_in_public([x[:10], x[10:15]], {"public pool": x[5:12], "test set": x[14:20]})
    # pool: x[5..11] all agents' (7); test: x[14] only (1).
    assert error.value.detail.startswith(
        "the public pool and test set hold 8 of the agents' records (by content: 7 in the public pool, "
        "1 in the test set); "
    )
    refuse_agents_records_in_public([x[:10]], {"public pool": x[10:], "test set": x[15:]})  # none: no error
    assert sorted_record_hashes(x[:10]).size == 10


# ------------------------------------------------------------------ every command reaches the check


def test_fedvote_run_with_a_byte_copy_as_target_exits_2_naming_target(agents_file, byte_copy, tmp_path, invoke):
    ledger, out = tmp_path / "ledger.db", tmp_path / "out"
    args = ["run", "--dataset", f"npz:{agents_file}", "--target", f"npz:{byte_copy}", *TINY,
            "--queries", "10", "--student-model", "logistic", "--ledger", ledger, "--out", out]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == ""
    assert refused_count(err) == RECORDS
    assert not ledger.exists() and not out.exists()


def test_fedvote_run_with_a_csv_copy_as_target_exits_2_naming_target(tmp_path, invoke):
    x, y = digits_arrays()
    agents = write_csv(tmp_path / "agents.csv", x, y)
    copy = Path(shutil.copyfile(agents, tmp_path / "copy.csv"))
    args = ["run", "--dataset", f"csv:{agents}", "--target", f"csv:{copy}", *TINY,
            "--queries", "10", "--student-model", "logistic"]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS


def test_fedvote_compare_with_a_byte_copy_as_target_exits_2_naming_target(
    agents_file, byte_copy, tmp_path, invoke
):
    ledger, out = tmp_path / "ledger.db", tmp_path / "out"
    args = ["compare", "--methods", "pate-fl", "--dataset", f"npz:{agents_file}", "--target",
            f"npz:{byte_copy}", "--agents", "4", "--epochs", "1", "--ledger", ledger, "--out", out]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS
    assert not ledger.exists() and not out.exists()


def test_fedvote_sweep_with_a_byte_copy_as_target_exits_2_naming_target(agents_file, byte_copy, tmp_path, invoke):
    out = tmp_path / "sweep"
    args = ["sweep", "--method", "pate-fl", "--dataset", f"npz:{agents_file}", "--target", f"npz:{byte_copy}",
            *TINY, "--queries", "10", "--student-model", "logistic", "--grid", "sigma=5,10", "--out", out]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS
    assert not (out / "sweep.json").exists()


def test_fedvote_label_with_a_byte_copy_as_target_exits_2_naming_target(agents_file, byte_copy, tmp_path, invoke):
    queries = tmp_path / "queries.npy"
    np.save(queries, digits_arrays(1500)[0][-3:])  # the querier's own examples
    ledger = tmp_path / "ledger.db"
    args = ["label", "--queries", queries, "--dataset", f"npz:{agents_file}", "--target", f"npz:{byte_copy}",
            *TINY, "--ledger", ledger]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS
    assert not ledger.exists()


def test_fedvote_audit_with_a_byte_copy_as_target_exits_2_naming_target(agents_file, byte_copy, invoke):
    args = ["audit", "--method", "pate-fl", "--dataset", f"npz:{agents_file}", "--target", f"npz:{byte_copy}",
            *TINY, "--queries", "10", "--student-model", "logistic", "--trials", "50"]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS


def test_fedvote_deploy_split_with_a_byte_copy_as_target_exits_2_and_writes_no_file(
    agents_file, byte_copy, tmp_path, invoke
):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(config(f"npz:{agents_file}", f"npz:{byte_copy}").to_dict()))
    out = tmp_path / "deployment"
    code, stdout, err = invoke(["deploy", "split", "--config", run_json, "--out", out])
    assert code == 2 and stdout == "" and refused_count(err) == RECORDS
    assert not out.exists()  # no agent's file, no server file, not even the directory


def test_a_validation_file_holding_the_agents_records_is_refused_naming_it(agents_file, tmp_path, invoke):
    x, y = digits_arrays()
    validation = tmp_path / "validation.npz"
    np.savez(validation, x=x[:30], y=y[:30])
    others = tmp_path / "others.npz"
    digits = load_dataset("digits")
    np.savez(others, x=digits.features[1000:1300], y=digits.labels[1000:1300])
    args = ["run", "--method", "weighted-pate", "--validation-file", validation, "--dataset",
            f"npz:{agents_file}", "--target", f"npz:{others}", *TINY, "--queries", "10",
            "--student-model", "logistic"]
    code, stdout, err = invoke(args)
    assert code == 2 and stdout == ""
    assert error_line(err).startswith(
        "fedvote: error: --validation-file: the validation set holds 30 of the agents' records (by content); "
    )
