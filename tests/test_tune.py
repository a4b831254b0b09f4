"""``tune``: the space from the diagnosis (pure rules), MSD406, real studies on a real MindSpore classifier, failed
trials, the storage's heartbeat."""
from __future__ import annotations

import logging

import sys
from pathlib import Path

import pytest

from mindspore_doctor.rules import tuning

sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
import tune_target  # noqa: E402  (tests/data)


# --- the search space (pure) ------------------------------------------------------------------------------------


def test_a_healthy_run_searches_around_the_range_tests_suggestion():
    space = tuning.auto_space(set(), learning_rate=0.1, lr_suggestion=0.02, has_dropout=True)
    assert sorted(space) == ["dropout", "learning_rate", "weight_decay"]
    lr = space["learning_rate"]
    assert (lr.low, lr.high, lr.log) == (pytest.approx(0.002), pytest.approx(0.2), True)
    assert "suggestion" in lr.why and (space["dropout"].low, space["dropout"].high) == (0.0, 0.5)


def test_divergence_searches_lower_rates_with_warmup_and_no_suggestion():
    space = tuning.auto_space({"MSD201", "MSD208"}, learning_rate=8.0)
    lr = space["learning_rate"]
    assert (lr.low, lr.high) == (pytest.approx(0.008), 8.0) and lr.why.startswith("MSD201, MSD208")
    assert "warmup_ratio" in space and "dropout" not in space  # no Dropout in the network


def test_slow_progress_searches_higher_rates():
    lr = tuning.auto_space({"MSD210"}, learning_rate=1e-4)["learning_rate"]
    assert (lr.low, lr.high) == (1e-4, pytest.approx(1e-2))


def test_overfitting_gets_regularisation_underfitting_capacity():
    over = tuning.auto_space({"MSD401"}, learning_rate=0.01, has_dropout=True)
    assert over["weight_decay"].high == 0.1 and over["dropout"].low == 0.1 and "width_multiplier" not in over
    under = tuning.auto_space({"MSD402"}, learning_rate=0.01, has_dropout=True)
    assert under["weight_decay"].high == 1e-4 and under["dropout"].high == 0.3
    assert under["width_multiplier"].choices == (1, 2, 4)
    assert "batch_size" in tuning.auto_space(set(), learning_rate=0.01, batch_sizes=(16, 32))


@pytest.mark.parametrize("space, message", [
    ({}, "empty"), ({"lr": (0.1, 0.01)}, "below high"), ({"lr": (0.0, 1.0, "log")}, "low > 0"),
    ({"lr": (0.1, 1.0, "exp")}, "'log' or 'linear'"), ({"lr": "fast"}, "give (low, high)"), ({"act": []}, "no choices"),
])
def test_a_bad_space_is_refused_with_the_reason(space, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tuning.parse_space(space)


def test_a_given_space_keeps_its_kinds():
    space = tuning.parse_space({"lr": (1e-4, 1e-1, "log"), "layers": (1, 4), "act": ["relu", "gelu"]})
    assert (space["lr"].kind, space["lr"].log, space["layers"].kind, space["act"].choices) == (
        "float", True, "int", ("relu", "gelu"))


def test_msd406_warns_on_many_trials_and_a_small_validation_set_only():
    (finding,) = tuning.optimistic_best("accuracy", 0.93, 200, 30, holdout=0.9)
    assert finding.code == "MSD406" and "30 trials" in finding.message and "200 validation samples" in finding.message
    assert "3.7%" in finding.message and "90.0%" in finding.message
    assert tuning.optimistic_best("accuracy", 0.93, 100_000, 30) == []  # a large validation set
    assert tuning.optimistic_best("accuracy", 0.93, 200, 1) == []  # nothing was chosen
    assert tuning.optimistic_best("mse", 0.2, 200, 30) == []  # only accuracies are judged


def test_msd406_reads_the_held_out_split_as_the_error_budget_does():
    """The budget's validation-set overfitting term, measured on the held-out split, settles the expected optimism."""
    (held,) = tuning.optimistic_best("accuracy", 0.93, 200, 30, holdout=0.90, holdout_samples=200)
    assert held.severity == "info" and "does not show it" in held.message
    assert held.evidence["validation_overfitting"] == pytest.approx(0.03) and held.evidence["noise"] > 0.03
    (worse,) = tuning.optimistic_best("accuracy", 0.93, 200, 30, holdout=0.80, holdout_samples=1000)
    assert worse.severity == "warning" and "+13.0% validation-set overfitting" in worse.message
    assert worse.evidence["validation_overfitting"] > worse.evidence["noise"]


def test_a_curve_is_hopeless_only_when_clearly_in_the_worst_quarter():
    others = [0.74, 0.75, 0.76, 0.70]
    noise = tuning.score_noise("accuracy", 0.68, 192)  # two standard errors on 192 samples: 6.7 points
    assert noise == pytest.approx(0.067, abs=0.001)
    assert not tuning.hopeless(0.68, others, True, noise)  # worse than all, but within the noise
    assert tuning.hopeless(0.35, others, True, noise) and tuning.hopeless(float("nan"), others, True)
    assert not tuning.hopeless(0.35, [], True, noise)  # nothing to compare with
    assert tuning.hopeless(2.0, [0.5, 0.6, 0.7], False) and not tuning.hopeless(0.65, [0.5, 0.6, 0.7], False)
    assert tuning.score_noise("eval loss", 2.0, 192) == 0.0


# --- real studies -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study():
    from mindspore_doctor import tune

    train, evaluation, holdout = tune_target.make_data()
    return tune(tune_target.build, train, evaluation, trials=12, holdout_ds=holdout, epochs=3, seed=0,
                progress=False)


def test_tune_finds_parameters_far_better_than_the_bad_default(study):
    from mindspore_doctor.tuner import study_summary

    summary = study_summary(study, 12)
    baseline = summary["baseline"]
    assert baseline["top_finding"]["code"] == "MSD201"  # lr 8 diverges: the Doctor says why
    assert summary["space"]["learning_rate"]["high"] < tune_target.DEFAULT_LR  # the space starts from that
    finished = [t for t in summary["trials"] if t["state"] in ("COMPLETE", "PRUNED")]
    assert len(finished) == 12
    assert study.best_value > baseline["value"] + 0.25, (study.best_value, baseline["value"])
    assert summary["best"]["holdout"] > baseline["value"] + 0.2  # on data the study never chose with
    assert set(summary["importance"]) == set(summary["space"])
    assert summary["findings"][0]["code"] == "MSD406"  # 192 validation samples, many trials


def test_the_doctor_does_no_harm_inside_a_trial(study):
    import mindspore as ms
    from mindspore.train import Model

    train, evaluation, _ = tune_target.make_data()
    ms.set_seed(0)  # what the trial did, without the Doctor and the pruner
    net, loss_fn, optimizer = tune_target.build(study.best_params)
    model = Model(net, loss_fn, optimizer, metrics={"accuracy"})
    model.train(3, train, dataset_sink_mode=False)
    assert model.eval(evaluation, dataset_sink_mode=False)["accuracy"] == study.best_value


def test_tune_is_seeded_and_reproducible(study):
    from mindspore_doctor import tune

    train, evaluation, _ = tune_target.make_data()
    again = tune(tune_target.build, train, evaluation, trials=3, epochs=3, seed=0, random_trials=4, progress=False)
    assert [(t.params, t.value) for t in again.trials] == [(t.params, t.value) for t in study.trials[:3]]


def test_the_doctor_and_the_learning_curve_prune_trials_and_the_study_goes_on(tmp_path):
    import optuna

    from mindspore_doctor import tune

    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    queued = optuna.create_study(study_name="pruning", storage=storage, direction="maximize")
    for lr in (0.05, 0.05, 1e-5, 80.0):  # two good trials, then a hopeless one, then one that goes NaN
        queued.enqueue_trial({"learning_rate": lr})
    train, evaluation, _ = tune_target.make_data()
    study = tune(tune_target.build, train, evaluation, space={"learning_rate": [80.0, 0.05, 1e-5]}, trials=5,
                 epochs=3, seed=0, random_trials=2, storage=storage, study_name="pruning", progress=False)
    good, slow, nan = study.trials[:2], study.trials[2], study.trials[3]
    assert all(t.state.name == "COMPLETE" and t.value > 0.6 for t in good)
    assert slow.state.name == "PRUNED" and list(slow.intermediate_values) == [1, 2]
    assert slow.user_attrs["pruned_reason"] == "learning curve in the worst quarter at epoch 2"
    msd201 = next(f for f in nan.user_attrs["findings"] if f["code"] == "MSD201")
    assert nan.state.name == "PRUNED" and nan.user_attrs["pruned_step"] == msd201["step"]
    assert nan.user_attrs["pruned_reason"] == f"MSD201 nonfinite-loss at step {msd201['step']}"
    assert nan.user_attrs["top_finding"]["severity"] == "error"
    assert not nan.intermediate_values  # stopped in its first epoch, before any evaluation
    assert len(study.trials) == 5 and study.trials[4].state.name in ("COMPLETE", "PRUNED")  # the study went on


def test_each_trial_is_a_run_with_its_parameters_in_tensorboard_and_mindinsight(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    from mindspore_doctor import tune
    from mindspore_doctor.export import mindinsight as mi

    train, evaluation, _ = tune_target.make_data()
    study = tune(tune_target.build, train, evaluation, space=tune_target.LR_SPACE, trials=2, epochs=2, seed=0,
                 summary_dir=str(tmp_path), tensorboard=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline", "trial_000", "trial_001"]
    trial = study.trials[1]
    run = tmp_path / "trial_001"
    events = EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["trial"].string_value == "trial_001"
    assert start.hparams["weight_decay"].number_value == pytest.approx(trial.params["weight_decay"])
    assert [e.value for e in events.Scalars("doctor/eval/accuracy")] == pytest.approx(list(trial.intermediate_values.values()))
    (lineage,) = run.glob("*_lineage")
    _, custom = [mi._lineage_pb2().LineageEvent.FromString(r) for r in mi.decode_records(lineage.read_bytes())]
    columns = {k: v for info in custom.user_defined_info.user_info
               for field in (info.map_str, info.map_double, info.map_int32) for k, v in field.items()}
    assert columns["trial"] == "trial_001" and columns["weight_decay"] == pytest.approx(trial.params["weight_decay"])


# --- failed trials and the storage's heartbeat ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fragile_study(tmp_path_factory):
    """Four queued trials: width 4 fails to build, batch 128 to load, width 2 to train; the fourth completes."""
    import optuna

    from mindspore_doctor import tune

    storage = f"sqlite:///{tmp_path_factory.mktemp('fragile') / 'tune.db'}"
    queued = optuna.create_study(study_name="fragile", storage=storage, direction="maximize")
    for width, batch in ((4, 32), (1, 128), (2, 32), (1, 32)):
        queued.enqueue_trial({"width_multiplier": width, "batch_size": batch})
    train_ds, evaluation = tune_target.make_factory_data()
    return tune(tune_target.fragile_build, train_ds, evaluation, space=tune_target.FRAGILE_SPACE, trials=4,
                epochs=1, storage=storage, study_name="fragile", progress=False)


def test_a_trial_whose_build_data_or_training_raises_fails_and_the_study_goes_on(fragile_study):
    states = [t.state.name for t in fragile_study.trials]
    assert states == ["FAIL", "FAIL", "FAIL", "COMPLETE"]
    errors = [t.user_attrs.get("error") for t in fragile_study.trials]
    assert errors[0] == ("build({'width_multiplier': 4, 'batch_size': 32, 'learning_rate': 0.05}) raised "
                         "MemoryError: cannot allocate the width-64 layers")
    assert errors[1] == ("train_ds({'width_multiplier': 1, 'batch_size': 128, 'learning_rate': 0.05}) raised "
                         "ValueError: a batch of 128 does not fit the pipeline's shared memory")
    assert errors[2].startswith("training with {'width_multiplier': 2, 'batch_size': 32, 'learning_rate': 0.05} "
                                "raised ValueError: ") and "\n" not in errors[2] and len(errors[2]) < 320
    assert errors[3] is None and fragile_study.best_trial.number == 3 and fragile_study.best_value > 0.6


def test_the_summary_lists_failed_trials_and_why(fragile_study):
    import json

    from mindspore_doctor.tuner import study_summary
    from mindspore_doctor.tuner.cli import format_tune_text

    summary = json.loads(json.dumps(study_summary(fragile_study, 4)))  # what --json prints
    rows = {t["number"]: t for t in summary["trials"]}
    assert rows[0]["failed_reason"] == fragile_study.trials[0].user_attrs["error"]
    assert rows[0]["params"]["width_multiplier"] == 4 and rows[3]["failed_reason"] is None
    assert summary["best"]["number"] == 3
    text = format_tune_text(summary)
    assert "1 complete, 0 pruned, 3 failed" in text
    failed = text.split("  failed trials:\n", 1)[1].splitlines()
    assert failed[0] == f"      0: {rows[0]['failed_reason']}"
    assert failed[1].startswith("      1: train_ds(") and failed[2].startswith("      2: training with ")


def test_a_live_trial_outlasts_a_storage_lock_and_a_lost_heartbeat(tmp_path, monkeypatch, caplog):
    import optuna

    from mindspore_doctor.tuner import storage as tuner

    storage = tuner.open_storage(f"sqlite:///{tmp_path / 'tune.db'}")
    with storage.engine.connect() as connection:  # how long a write waits for another process's lock
        lock_wait_s = connection.exec_driver_sql("PRAGMA busy_timeout").scalar() / 1000
    # a live process beats at least every HEARTBEAT_S + lock wait; twice that when one beat is lost
    assert tuner.GRACE_S > 2 * (tuner.HEARTBEAT_S + lock_wait_s)

    def locked(self, trial_id):
        raise optuna.exceptions.StorageInternalError("commit failed") from RuntimeError("database is locked")

    monkeypatch.setattr(optuna.storages.RDBStorage, "record_heartbeat", locked)
    # another test's logging set-up may have switched the logger off or raised its level: the warning is the subject
    monkeypatch.setattr(tuner.logger, "disabled", False)
    with caplog.at_level(logging.WARNING, logger=tuner.logger.name):
        storage.record_heartbeat(0)  # Optuna's heartbeat thread would end here: the trial would be failed as dead
    assert "database is locked" in caplog.text and "the next one follows in 2 s" in caplog.text
