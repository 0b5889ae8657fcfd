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


def test_no_two_test_files_share_a_name():
    """The test folders are not packages: pytest imports each file by its basename, and a second file of the same
    name fails the whole run at collection ("import file mismatch")."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path
