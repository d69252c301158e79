"""The student's arithmetic reaches the student of a run and is recorded as used (``details.student_precision``)."""

from __future__ import annotations

import pytest

from fedvote.methods.majority_vote import MajorityVote
from fedvote.models import precision
from fedvote.models.training import TrainingConfig
from fedvote.privacy.ledger import PrivacyLedger
from fedvote.transport.local import LocalTransport


@pytest.mark.parametrize(("given", "recorded"), [("auto", "float32"), ("bfloat16", "bfloat16"), ("float32", "float32")])
def test_a_voting_run_records_the_arithmetic_its_student_used(monkeypatch, small_federation, given, recorded) -> None:
    # digits' examples are 8x8 images: "auto" is float32 there even on a CPU with native bfloat16.
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    used: list[str] = []
    original = precision.training_arithmetic

    def spy(name: str, device_type: str = "cpu"):  # what the student's training steps ran in
        used.append(name)
        return original(name, device_type)

    for module in ("fedvote.models.training", "fedvote.models.semi_supervised"):
        monkeypatch.setattr(f"{module}.training_arithmetic", spy)
    student = TrainingConfig(model="logistic", epochs=2, precision=given)
    method = MajorityVote(
        queries=30, min_responders=10, teacher=TrainingConfig(model="logistic", epochs=2), student=student,
        self_training_rounds=0, semi_supervised="supervised",
    )  # fmt: skip
    outcome = method.run(small_federation.server_data(), LocalTransport(small_federation, seed=0), PrivacyLedger())
    assert outcome.details["student_precision"] == recorded
    assert used and set(used) >= {recorded}  # the student (and the teachers' loop, in float32) trained so
    assert "bfloat16" not in used or recorded == "bfloat16"
