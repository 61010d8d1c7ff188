from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.job_contract import attempt_dir_name, next_attempt_index
from megahour.run.policy import (
    DEFAULT_TRANSIENT_EXIT_CODES,
    INTERRUPTED_EXIT,
    BudgetState,
    ExitContract,
    RetryBudget,
    checkpoint_advanced,
    classify,
    slurm_restart_count,
)

CONTRACT = ExitContract()
KILLED = -9


def test_default_contract_matches_slurm_conf_requeue_exit():
    assert (CONTRACT.requeue_exit, CONTRACT.app_error_exit) == (85, 86)
    # the four signals' statuses both ways, and a rank that lost its peer (job_contract.PEER_LOST_EXIT)
    assert {137, 143, 134, 139, -9, -15, -6, -11, 75} == DEFAULT_TRANSIENT_EXIT_CODES


@pytest.mark.parametrize(
    "returncode,expected",
    [
        (0, "success"),
        (-9, "transient"),
        (137, "transient"),
        (-15, "transient"),
        (143, "transient"),
        (-6, "transient"),
        (134, "transient"),
        (-11, "transient"),
        (139, "transient"),
        (1, "app_error"),
        (3, "app_error"),
        (2, "app_error"),
        (-2, "app_error"),  # SIGINT: someone stopped it on purpose
        (85, "app_error"),
    ],
)
def test_classify(returncode, expected):
    assert classify(returncode, CONTRACT) == expected


def test_custom_transient_codes_replace_the_defaults():
    contract = ExitContract(transient_exit_codes=frozenset({42}))
    assert classify(42, contract) == "transient"
    assert classify(-9, contract) == "app_error"


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"requeue_exit": 0}, "--requeue-exit=0"),
        ({"app_error_exit": 256}, "--app-error-exit=256"),
        ({"requeue_exit": 86, "app_error_exit": 86}, "pass two different codes"),
    ],
)
def test_impossible_contracts_name_the_flag(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        ExitContract(**kwargs)


def test_negative_max_restarts_is_rejected():
    with pytest.raises(ValueError, match="--max-restarts=-1"):
        RetryBudget(-1)


def test_success_exits_zero():
    d = RetryBudget(3).decide(BudgetState(restarts_used=2), 0, checkpoint_advanced=False)
    assert (d.action, d.exit_code) == ("exit_success", 0)


def test_app_error_never_restarts_even_with_budget_left_and_new_checkpoint():
    d = RetryBudget(3).decide(BudgetState(), 3, checkpoint_advanced=True)
    assert (d.action, d.exit_code, d.restarts_used) == ("app_error", 86, 0)


def test_app_error_uses_the_configured_code():
    budget = RetryBudget(3, ExitContract(requeue_exit=75, app_error_exit=76))
    assert budget.decide(BudgetState(), 1, False).exit_code == 76


def test_transient_restarts_until_budget_then_requeues_with_85():
    budget = RetryBudget(2)
    state = BudgetState()
    actions = []
    for _ in range(3):
        d = budget.decide(state, KILLED, checkpoint_advanced=False)
        actions.append((d.action, d.restarts_used))
        state = state.after(d, None)
    assert actions == [("restart", 1), ("restart", 2), ("requeue", 2)]
    assert d.exit_code == 85
    assert "Slurm requeues" in d.reason


def test_zero_budget_requeues_at_once():
    d = RetryBudget(0).decide(BudgetState(), KILLED, False)
    assert (d.action, d.exit_code) == ("requeue", 85)


def test_checkpoint_advance_resets_the_budget():
    budget = RetryBudget(2)
    exhausted = BudgetState(restarts_used=2, last_checkpoint="step-1@1")
    assert budget.decide(exhausted, KILLED, checkpoint_advanced=False).action == "requeue"
    d = budget.decide(exhausted, KILLED, checkpoint_advanced=True)
    assert (d.action, d.restarts_used) == ("restart", 1)
    assert "budget reset" in d.reason


def test_state_keeps_the_known_checkpoint_when_the_scan_sees_none():
    d = RetryBudget(3).decide(BudgetState(), KILLED, False)
    state = BudgetState(0, "step-1@1").after(d, None)
    assert state == BudgetState(1, "step-1@1")
    assert BudgetState(0, "step-1@1").after(d, "step-2@2").last_checkpoint == "step-2@2"


@pytest.mark.parametrize(
    "previous,current,expected",
    [
        (None, None, False),
        (None, "a@1", True),
        ("a@1", "a@1", False),
        ("a@1", "b@2", True),
        ("a@1", None, False),
    ],
)
def test_checkpoint_advanced(previous, current, expected):
    assert checkpoint_advanced(previous, current) is expected


def test_sigterm_requeues_even_after_a_clean_step_exit():
    d = RetryBudget(3).on_signal(BudgetState(), signal.SIGTERM, 0)
    assert (d.action, d.exit_code) == ("requeue", 85)


def test_sigint_stops_without_requeue():
    d = RetryBudget(3).on_signal(BudgetState(), signal.SIGINT, None)
    assert (d.action, d.exit_code) == ("interrupted", INTERRUPTED_EXIT)
    assert d.exit_code not in (85, 0)


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, 0),
        ({"SLURM_RESTART_COUNT": ""}, 0),
        ({"SLURM_RESTART_COUNT": "abc"}, 0),
        ({"SLURM_RESTART_COUNT": "1.5"}, 0),
        ({"SLURM_RESTART_COUNT": "-3"}, 0),
        ({"SLURM_RESTART_COUNT": " 4 "}, 4),
        ({"SLURM_RESTART_COUNT": "2"}, 2),
    ],
)
def test_slurm_restart_count(env, expected):
    assert slurm_restart_count(env) == expected


@pytest.mark.parametrize(
    "names,expected",
    [
        ([], 0),
        (["attempt-0"], 1),
        (["attempt-0", "attempt-7", "attempt-3"], 8),
        ([".attempt-4.tmp-123", "attempt-x", "attempt-", "attempt-2.bak", "notes.txt"], 0),
        (["attempt-٣"], 0),  # only ASCII digits: int() would accept this, we never write it
    ],
)
def test_next_attempt_index(names, expected):
    assert next_attempt_index(names) == expected


# --- properties --------------------------------------------------------------------------

returncodes = st.sampled_from([0, 1, 3, -9, 137, -15, 143, -6, 134, -11, 139])
transient_heavy = st.lists(st.tuples(returncodes, st.booleans()), max_size=60)


@given(max_restarts=st.integers(0, 6), steps=transient_heavy)
def test_restarts_without_checkpoint_advance_never_exceed_the_budget(max_restarts, steps):
    budget = RetryBudget(max_restarts)
    state = BudgetState()
    since_advance = 0
    for returncode, advanced in steps:
        d = budget.decide(state, returncode, advanced)
        if advanced:
            since_advance = 0
        kind = classify(returncode, CONTRACT)
        if kind == "transient":
            # Requeue only once the budget is really spent; restart only while it is not.
            assert (d.action == "requeue") == (since_advance == max_restarts)
        else:
            assert d.action == {"success": "exit_success", "app_error": "app_error"}[kind]
        if d.action != "restart":
            break
        since_advance += 1
        assert since_advance <= max_restarts
        assert d.restarts_used == since_advance
        state = state.after(d, None)


names = st.lists(
    st.one_of(st.integers(0, 10_000).map(lambda i: f"attempt-{i}"), st.text(max_size=12)), max_size=30
)


@given(names)
def test_next_attempt_index_is_never_taken(existing):
    index = next_attempt_index(existing)
    assert index >= 0
    assert attempt_dir_name(index) not in existing
    taken = {
        int(n.split("-", 1)[1])
        for n in existing
        if n.startswith("attempt-") and n[8:].isascii() and n[8:].isdigit()
    }
    assert index not in taken
    assert all(index > t for t in taken)


def test_a_rank_that_lost_its_peer_is_transient() -> None:
    from megahour.job_contract import PEER_LOST_EXIT
    from megahour.run.policy import ExitContract, RetryBudget, classify

    assert classify(PEER_LOST_EXIT, ExitContract()) == "transient"
    decision = RetryBudget(3).decide(BudgetState(), PEER_LOST_EXIT, checkpoint_advanced=False)
    assert decision.action == "restart"


def test_an_unfit_allocation_turns_a_restart_into_a_requeue() -> None:
    from megahour.run.policy import RetryBudget

    budget = RetryBudget(3)
    restart = budget.decide(BudgetState(restarts_used=1), 137, checkpoint_advanced=False)
    assert (restart.action, restart.restarts_used) == ("restart", 2)
    requeue = budget.requeue_instead(restart, "node gpu-2 is drng (megahour:xid_reset_gpu)")
    assert (requeue.action, requeue.exit_code, requeue.restarts_used) == ("requeue", 85, 1)
    assert requeue.reason.startswith("node gpu-2 is drng (megahour:xid_reset_gpu); not restarting in place")
    # only a restart is turned: success, application errors and requeues stay what they are
    for other in (
        budget.decide(BudgetState(), 0, checkpoint_advanced=False),
        budget.decide(BudgetState(), 3, checkpoint_advanced=False),
        budget.decide(BudgetState(restarts_used=3), 137, checkpoint_advanced=False),
    ):
        assert budget.requeue_instead(other, "unfit") is other
