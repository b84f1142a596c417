"""The documentation's promises, checked on its text: the README stays an index (at most 300 lines, the topics on
pages under docs/), every link between the pages lands on a file and a heading that exist, and CI (`.ci/run`)
installs exactly what the README's "Install everything and run the tests" says and runs its test commands.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INSTALL_SECTION = "## Install everything and run the tests"


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "agent").rglob("README.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks, where a link is a link."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose(page.read_text(encoding="utf-8")), re.M)}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` whose file, or whose `#anchor` in that file, does not exist."""
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not ours to check offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            found.append(f"{page.relative_to(root)}: {target}: no such file")
        elif anchor and (dest.is_dir() or anchor not in anchors(dest)):
            found.append(f"{page.relative_to(root)}: {target}: no such heading")
    return found


def test_the_readme_is_an_index_of_at_most_300_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_every_link_between_the_pages_lands():
    found = [b for page in pages() for b in broken_links(page)]
    assert found == [], "\n".join(found)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "b.md").write_text("# B\n\n## The part\n")
    page = tmp_path / "a.md"
    page.write_text("# A\n\n[ok](b.md#the-part) [ok](#a) [web](https://x.org/#y)\n[f](c.md) [h](b.md#other) [s](#z)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page, tmp_path) == ["a.md: c.md: no such file", "a.md: b.md#other: no such heading",
                                            "a.md: #z: no such heading"]


def commands(script: str) -> list[list[str]]:
    """The shell commands of a script or a bash block, continuation lines joined, comments dropped, split on &&."""
    joined = re.sub(r"\\\n", " ", script)
    found = []
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            found += [shlex.split(part) for part in line.split("&&")]
    return found


def installs(script: str) -> set[tuple[str, tuple[str, ...]]]:
    """What a script installs, as (tool, what): apt and npm packages, pip's arguments less its quiet flag (sudo,
    variables set for the command and redirections aside)."""
    found = set()
    for argv in commands(script):
        argv = [a for a in argv if a != "sudo" and not a.startswith(">") and not re.match(r"[A-Z_]+=", a)]
        if argv[:2] == ["apt-get", "install"]:
            found.add(("apt", tuple(sorted(a for a in argv[argv.index("install") + 1:] if not a.startswith("-")))))
        elif argv[:2] == ["npm", "install"]:
            found.add(("npm", tuple(sorted(a for a in argv[2:] if not a.startswith("-")))))
        elif argv[:2] == ["pip", "install"]:
            found.add(("pip", tuple(a for a in argv[2:] if a != "--quiet")))
    return found


def checks(script: str) -> set[tuple[str, ...]]:
    """The `python -m` commands a script runs (ruff, pytest; after a wrapper such as `timed LABEL` too), less
    pytest's `--durations` report."""
    found = set()
    for argv in commands(script):
        start = next((i for i in range(len(argv) - 2) if argv[i:i + 2] == ["python", "-m"]), None)
        if start is not None and argv[start + 2] in ("pytest", "ruff", "mypy"):
            found.add(tuple(a for a in argv[start:] if not a.startswith("--durations")))
    return found


def install_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(INSTALL_SECTION)
    return text[start:text.index("\n## ", start + 1)]


def test_ci_installs_exactly_what_the_readme_says():
    blocks = re.findall(r"^```bash\n(.*?)^```", install_section(), re.M | re.S)
    readme, ci = installs(blocks[0]), installs((ROOT / ".ci/run").read_text(encoding="utf-8"))
    assert {tool for tool, _ in readme} == {"apt", "npm", "pip"}
    assert ci == readme


def test_ci_runs_the_readmes_checks():
    readme = checks("\n".join(re.findall(r"^```bash\n(.*?)^```", install_section(), re.M | re.S)))
    ci = checks((ROOT / ".ci/run").read_text(encoding="utf-8"))
    assert ("python", "-m", "ruff", "check", ".") in ci
    assert sum(argv[2] == "pytest" for argv in ci) == 2 and ci <= readme


def test_the_install_check_sees_a_package_ci_lacks():
    readme = installs("sudo apt-get install bubblewrap chromium\npip install -e \".[dev,ray]\"  # the project\n")
    ci = installs("X=1 apt-get install -y -qq bubblewrap \\\n    procps >/dev/null\n"
                  "pip install --quiet -e \".[dev,ray]\"\n")
    assert readme == {("apt", ("bubblewrap", "chromium")), ("pip", ("-e", ".[dev,ray]"))}
    assert ci == {("apt", ("bubblewrap", "procps")), ("pip", ("-e", ".[dev,ray]"))} != readme
