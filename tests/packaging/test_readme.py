"""The README's Quick start is exactly two commands, and CI runs the very same test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_quick_start_has_exactly_two_commands_main_job_then_tests() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2
    main_job, tests = commands
    assert main_job.endswith("tent check")
    assert "pytest" in tests


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    _, tests = _quick_start_commands()
    assert tests in (ROOT / ".ci" / "run").read_text()
