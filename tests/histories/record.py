"""Re-record the replay corpus: runs the tests that save histories, with recording on, then replays
the corpus (tests/test_replay.py).

The tests' clients and workers use the production data converter (`agentwolf.payloads.data_converter()`,
tests/conftest.py), so payloads over 256 KiB go to the run's filesystem store and history keeps a
reference; the test that records `external_payload` copies the payloads it references into
tests/histories/payloads (and removes the ones no history references any more), where the replayer's
store points. Commit the histories and that folder together.
"""

import os
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
tests = [
    "tests/test_session.py",
    "tests/test_failures.py",
    "tests/test_continue_as_new.py",
    "tests/test_teams.py",
    "tests/test_approvals.py",
    "tests/test_deploys.py",
    "tests/test_configs.py",
    "tests/test_skills_in_sessions.py",
    "tests/test_session_correctness.py",
    "tests/test_session_lifecycle.py",
    "tests/test_jobs.py::test_an_invalid_result_goes_back_to_the_model",
    "tests/test_cost.py::test_a_usd_turn_budget_warns_at_80_percent_and_stops_the_turn_cleanly",
    "tests/test_acp.py::test_the_editors_mcp_servers_join_its_session_only",
    "tests/test_schedules.py::test_a_session_schedule_delivers_under_its_busy_policy",
    "tests/test_schedules.py::test_a_registry_job_runs_the_config_version_current_at_its_firing",
    "tests/test_schedules.py::test_a_retried_delivery_steers_once_and_never_interrupts_its_own_turn",
    "tests/test_schedules.py::test_a_session_or_thread_named_like_a_future_run_cannot_block_it",
    "tests/test_fanout.py::test_calls_past_the_manifest_limits_are_refused_and_the_rest_run_few_at_once",
    "tests/test_replay.py::test_a_session_whose_tool_output_went_to_external_storage_replays",
    "tests/test_compaction.py",
    "tests/test_transcript_archive.py::test_older_messages_go_to_the_store_and_nothing_is_lost",
    "tests/test_fork.py::test_rewind_keeps_the_later_turns_as_a_branch_and_redo_restores_them",
    "tests/test_evals.py",
    "tests/test_evaluators.py::test_evaluators_pass_the_recorded_answers_fail_regressed_ones_and_gate_a_push",
    "tests/test_console.py::test_the_console_signs_in_streams_steers_and_accounts",
    "tests/test_local_tool_calls.py",
]
env = {**os.environ, "WOLF_RECORD_HISTORIES": "1"}
recorded = subprocess.call([sys.executable, "-m", "pytest", "-q", *tests], cwd=root, env=env)
if recorded:
    sys.exit(recorded)
replayed = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/test_replay.py"], cwd=root)
sys.exit(replayed)
