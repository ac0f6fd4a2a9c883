"""Re-record the replay corpus: runs the tests that save histories, with recording on."""

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
    "tests/test_configs.py",
    "tests/test_skills_in_sessions.py",
]
env = {**os.environ, "WOLF_RECORD_HISTORIES": "1"}
sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", *tests], cwd=root, env=env))
