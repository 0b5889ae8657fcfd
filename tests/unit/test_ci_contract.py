"""`.ci/run` must run exactly the README's test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    lines = (ROOT / "README.md").read_text().splitlines()
    marker = lines.index("<!-- test-command -->")
    block = lines[marker + 1 :]
    start = block.index("```bash")
    return block[start + 1]


def test_ci_runs_the_readme_test_command_verbatim():
    command = readme_test_command()
    assert "pytest" in command
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci_lines
