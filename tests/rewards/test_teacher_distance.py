"""Co-rewarding-II's teacher–policy weight distance (issue 38): measured in the EMA update from the tensors it
averages, equal to ‖θ − θ_T‖ computed independently; a teacher that is the policy (its tensors the policy's) stops
the run with an error once the policy has moved; a teacher equal to a policy that has not moved is no error."""

from __future__ import annotations

import copy

import pytest
import torch

from coreward.rewards.co_rewarding_2.ema_teacher import EmaTeacher
from coreward.rewards.co_rewarding_2.teacher_weights import full_pairs
from coreward.runtime.errors import CorewardError


def models(seed: int = 0):
    torch.manual_seed(seed)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    return policy, copy.deepcopy(policy).requires_grad_(False)


def train(policy: torch.nn.Module) -> None:
    """What an optimizer step does to the policy between two teacher updates: every weight moves."""
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.1 * torch.randn_like(p))


def distance(teacher: torch.nn.Module, policy: torch.nn.Module) -> float:
    return sum(float((t.double() - p.double()).pow(2).sum())
               for t, p in zip(teacher.parameters(), policy.parameters(), strict=True)) ** 0.5


def test_the_distance_is_the_one_between_the_two_models_after_each_update():
    policy, teacher_module = models()
    teacher = EmaTeacher(alpha_start=0.3, alpha_end=0.05)
    teacher.bind(teacher_module, full_pairs(teacher_module, policy))
    teacher.maybe_update(0, 5)
    assert teacher.last_distance == 0.0  # the teacher starts as the policy
    for t in range(1, 5):
        train(policy)
        before = distance(teacher_module, policy)
        teacher.maybe_update(t, 5)
        assert teacher.last_distance == pytest.approx(distance(teacher_module, policy), rel=1e-9)
        # θ − θ_T' = (1 − α)(θ − θ_T): the update closes a fraction α of the gap
        assert teacher.last_distance == pytest.approx((1 - teacher.last_alpha) * before, rel=1e-6)
        assert teacher.last_distance > 0


def test_a_teacher_that_shares_the_policys_tensors_stops_the_run_once_the_policy_moved():
    policy, _ = models()
    teacher = EmaTeacher(alpha_start=0.3, alpha_end=0.05)
    teacher.bind(policy, full_pairs(policy, policy))  # the teacher *is* the policy: every tensor shared
    teacher.maybe_update(0, 5)  # at the first update a teacher equal to the policy is what it starts as
    train(policy)
    with pytest.raises(CorewardError, match=r"before step 1 the EMA teacher's weights equal the policy's .*α = 0\.276 < 1"
                                            r".*samples with the policy's weights"):
        teacher.maybe_update(1, 5)


def test_a_teacher_equal_to_a_policy_that_did_not_move_or_an_alpha_of_1_is_no_error():
    still, copy_of_still = models()
    teacher = EmaTeacher(alpha_start=0.3, alpha_end=0.05)
    teacher.bind(copy_of_still, full_pairs(copy_of_still, still))
    for t in range(3):  # no learning signal: the policy stays where it started, and so does the teacher (but for the
        teacher.maybe_update(t, 3)  # rounding of (1 − α)·θ_T + α·θ, which need not give θ back exactly)
        assert teacher.last_distance < 1e-6
    tracking_policy, tracking_module = models()
    tracking = EmaTeacher(alpha_start=1.0, alpha_end=1.0)  # α = 1: the teacher is the policy of the step before
    tracking.bind(tracking_module, full_pairs(tracking_module, tracking_policy))
    for t in range(3):
        train(tracking_policy)
        tracking.maybe_update(t, 3)
        assert tracking.last_distance == 0.0
