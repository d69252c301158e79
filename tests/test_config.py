import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedvote.config import DEFAULT_EPSILON, FederationConfig, PrivacyConfig, RunConfig, load_run_config
from fedvote.data.partition import PartitionSpec
from fedvote.errors import ConfigError
from fedvote.methods import check_method
from fedvote.models.training import TrainingConfig

DATA = Path(__file__).parent / "data"
LEGACY_KNN = DATA / "legacy_result.json"  # fedvote run --method private-knn-fl --k 3 ... before options
LEGACY_GRADIENT = DATA / "legacy_gradient_result.json"  # fedvote run --method dp-fedavg --rounds 3 ...


def test_config_round_trips_through_its_dict():
    config = RunConfig(
        federation=FederationConfig(agents=7, partition=PartitionSpec("dirichlet", alpha=0.3)),
        privacy=PrivacyConfig(sigma=3.0, delta=1e-5, accountant="rdp", min_responders=5),
        teacher=TrainingConfig(model="cnn", epochs=3),
        queries=20,
        seed=9,
        options={"release": "labels", "threshold": 5.0},
    )
    assert RunConfig.from_dict(config.to_dict()) == config
    assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_default_privacy_is_calibrated_to_the_default_epsilon():
    assert PrivacyConfig().target_epsilon == DEFAULT_EPSILON
    assert PrivacyConfig(epsilon=2.0).target_epsilon == 2.0
    assert PrivacyConfig(sigma=0.0).target_epsilon is None


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: PrivacyConfig(accountant="moments"), "accountant"),
        (lambda: PrivacyConfig(min_responders=0), "min_responders"),
        (lambda: check_method(RunConfig(method="dp-magic")), "method"),
        (lambda: RunConfig(queries=0), "queries"),
        (lambda: TrainingConfig(model="resnet"), "model"),
        (lambda: TrainingConfig(epochs=0), "epochs"),
        (lambda: TrainingConfig(learning_rate=0.0), "learning_rate"),
        (lambda: TrainingConfig(precision="float16"), "precision"),
        (lambda: RunConfig(teacher=TrainingConfig(model="auto", epochs=None, precision="bfloat16")), "teacher.precision"),
    ],
)
def test_bad_configs_name_the_argument(make, argument):
    with pytest.raises(ConfigError) as error:
        make()
    assert error.value.argument == argument


def test_importing_the_config_imports_no_method():
    """config.py knows no method: the config ↔ methods import circle is gone."""
    code = (
        "import sys, fedvote.config; "
        "loaded = [m for m in sys.modules if m.startswith('fedvote.methods')]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("config", "argument"),
    [
        (RunConfig(method="pate-fl", options={"k": 5}), "k"),
        (RunConfig(method="pate-fl", options={"rounds": 7}), "rounds"),
        (RunConfig(method="private-knn-fl", options={"gradient_model": "cnn"}), "gradient_model"),
        (RunConfig(method="fedavg", options={"clip_norm": 0.1}), "clip_norm"),
        (RunConfig(method="dp-fedsgd", options={"noise": "server"}), "noise"),
        (RunConfig(method="prifedsync", options={"lr_decay": 0.9}), "lr_decay"),
        (RunConfig(method="private-knn-fl", options={"k": 0}), "k"),
        (RunConfig(method="dp-fedavg", options={"rounds": 0}), "rounds"),
        (RunConfig(method="fedavg", options={"gradient_model": "resnet"}), "gradient_model"),
    ],
)
def test_a_method_validates_its_options_where_it_is_resolved(config, argument):
    """A config is built without knowing its method; the method refuses an option it does not
    take, or a bad value, by name when it is resolved."""
    with pytest.raises(ConfigError) as error:
        check_method(config)
    assert error.value.argument == argument


def test_a_run_refuses_a_bad_option_before_loading_anything(monkeypatch):
    import fedvote.runner as runner

    def no_data(config):
        raise AssertionError("the data was loaded before the options were checked")

    monkeypatch.setattr(runner, "make_federation", no_data)
    with pytest.raises(ConfigError) as error:
        runner.run(RunConfig(method="pate-fl", options={"k": 5}))
    assert error.value.argument == "k"
    assert str(error.value) == "k: is not an option of method 'pate-fl'"


def test_a_legacy_result_loads_its_knn_and_gradient_sections_as_options():
    """result.json from before the options seam: the given values of its ``knn`` and ``gradient``
    sections become options of the same names (``gradient.model`` is ``gradient_model``); the
    defaults it recorded for the method's other kind of settings are dropped."""
    knn = load_run_config(LEGACY_KNN)
    assert "knn" in json.loads(LEGACY_KNN.read_text())["config"]
    assert knn.method == "private-knn-fl"
    assert knn.options == {"k": 3, "features": "random", "feature_dim": 8, "bound": "paper"}
    check_method(knn)
    gradient = load_run_config(LEGACY_GRADIENT)
    assert gradient.method == "dp-fedavg"
    assert gradient.options == {
        "rounds": 3, "sampling_rate": 1.0, "local_steps": 2, "clip_norm": 0.5, "noise": "server",
        "gradient_model": "logistic",
    }  # fmt: skip
    check_method(gradient)
    assert "knn" not in knn.to_dict() and "gradient" not in knn.to_dict()
    assert RunConfig.from_dict(knn.to_dict()) == knn


def test_a_legacy_section_is_checked():
    legacy = json.loads(LEGACY_GRADIENT.read_text())["config"]
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({**legacy, "gradient": {**legacy["gradient"], "momentum": 0.9}})
    assert error.value.argument == "gradient"
    with pytest.raises(ConfigError) as error:  # a setting both in the old section and in options
        RunConfig.from_dict({**legacy, "options": {"rounds": 4}})
    assert error.value.argument == "rounds"
    # a foreign setting an old run recorded (and ignored) is kept, and refused by name at run time
    pate = RunConfig.from_dict({**legacy, "method": "pate-fl"})
    with pytest.raises(ConfigError, match="is not an option of method 'pate-fl'"):
        check_method(pate)


# The experiments' run configs (a file without "method" is a grid of its own script).
EXPERIMENT_RUN_CONFIGS = sorted(
    path
    for path in glob.glob(str(Path(__file__).parents[1] / "experiments" / "*.json"))
    if "method" in json.loads(Path(path).read_text())
)


@pytest.mark.parametrize("path", EXPERIMENT_RUN_CONFIGS, ids=lambda path: Path(path).stem)
def test_the_committed_experiment_configs_still_load(path):
    check_method(load_run_config(path))


@pytest.mark.parametrize("path", [LEGACY_KNN, LEGACY_GRADIENT], ids=["private-knn-fl", "dp-fedavg"])
def test_a_legacy_result_reruns_to_the_same_result(path, tmp_path):
    """``fedvote run --config old/result.json`` reruns the recorded run: same σ, ε and accuracy
    (the run was seeded, noise included). σ is calibrated again, so it agrees within the
    calibration's tolerance (the search changed since these files were written), and ε with it."""
    from fedvote.cli import main
    from fedvote.privacy.calibrate import SIGMA_RELATIVE_TOLERANCE

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--config", str(path), "--out", str(tmp_path)])
        raise SystemExit(0)
    assert exit_info.value.code == 0
    old = json.loads(path.read_text())
    new = json.loads((tmp_path / "result.json").read_text())
    assert new["sigma"] == pytest.approx(old["sigma"], rel=2 * SIGMA_RELATIVE_TOLERANCE)
    assert new["accuracy"] == pytest.approx(old["accuracy"])
    for level in ("agent", "instance"):  # ε moves with σ by at most a few times its relative change
        old_epsilon = old["privacy"][level]["epsilon"]
        assert new["privacy"][level]["epsilon"] == pytest.approx(old_epsilon, rel=10 * SIGMA_RELATIVE_TOLERANCE)
    assert new["config"]["options"] == load_run_config(path).options


def test_framing_defaults_to_auto_and_a_legacy_result_reruns_unframed():
    """A result.json written before ``framing`` resampled its domains plainly; it reruns so."""
    assert FederationConfig().framing == "auto"
    legacy = json.loads(LEGACY_KNN.read_text())["config"]
    assert "framing" not in legacy["federation"]
    assert load_run_config(LEGACY_KNN).federation.framing == "none"
    with pytest.raises(ConfigError) as error:
        FederationConfig(framing="centred")
    assert error.value.argument == "framing"


def test_the_student_precision_defaults_to_auto_and_a_legacy_result_reruns_in_float32():
    """A result.json written before bfloat16 students trained its student in float32; it reruns so."""
    from fedvote.settings import build_config

    assert RunConfig().student.precision == "auto"
    assert RunConfig().teacher.precision == "float32"
    assert build_config("pate-fl").student.precision == "auto"
    assert build_config("pate-fl", student_precision="float32").student.precision == "float32"
    with pytest.raises(ConfigError) as error:
        build_config("pate-fl", student_precision="half")
    assert error.value.argument == "student_precision"
    legacy = json.loads(LEGACY_KNN.read_text())["config"]
    assert "precision" not in legacy["student"]
    assert load_run_config(LEGACY_KNN).student.precision == "float32"
    config = RunConfig(student=TrainingConfig(model="auto", precision="bfloat16"))
    assert RunConfig.from_dict(config.to_dict()).student.precision == "bfloat16"


def test_a_config_written_by_hand_takes_todays_defaults_for_every_key_it_leaves_out(tmp_path):
    """docs/deploy.md's run.json names only what it changes; the rest is what ``fedvote run`` plans."""
    written = {
        "method": "pate-fl",
        "federation": {"dataset": "cifar10", "agents": 5, "partition": {"scheme": "dirichlet"}},
        "privacy": {"epsilon": 4.0},
        "teacher": {"epochs": 10},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(written))
    config = load_run_config(path)
    defaults = RunConfig()
    assert config == RunConfig(
        federation=FederationConfig(dataset="cifar10", agents=5, partition=PartitionSpec("dirichlet")),
        privacy=PrivacyConfig(epsilon=4.0),
        teacher=TrainingConfig(model="auto", epochs=10),
    )
    # not the rules for results recorded before these fields existed
    assert config.federation.input_features == "auto" and config.federation.framing == "auto"
    assert (config.semi_supervised, config.query_selection) == (defaults.semi_supervised, defaults.query_selection)
    assert config.student == defaults.student and config.student.model == "auto"


def test_a_recorded_config_without_newer_fields_reruns_as_it_ran():
    recorded = RunConfig().to_dict()
    for name in ("semi_supervised", "query_selection"):
        del recorded[name]
    del recorded["federation"]["input_features"], recorded["federation"]["framing"]
    del recorded["student"]["precision"]
    config = RunConfig.from_dict(recorded)
    assert (config.semi_supervised, config.query_selection) == ("self-training", "random")
    assert (config.federation.input_features, config.federation.framing) == ("none", "none")
    assert config.student.precision == "float32"


def test_what_counts_as_recorded():
    from fedvote.config import is_recorded

    assert is_recorded(RunConfig().to_dict())
    assert is_recorded(json.loads(LEGACY_KNN.read_text())["config"])
    assert not is_recorded({"method": "pate-fl", "federation": {"dataset": "digits"}})
    partial = RunConfig().to_dict()
    del partial["federation"]["public_fraction"]
    assert not is_recorded(partial)
