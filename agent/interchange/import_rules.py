"""What an imported record may make this machine do: its text is data, so what of it ends up run or named as a
program is held to allow-lists here (pure functions; each raises ValueError with the reason, one line).

- install commands: `[setup] venv` commands run through a shell on this machine, outside any checkout, so only
  pip installs of named packages pass, and they are written back as the argv that was checked (`shlex.join`),
  never as the record's text;
- the base commit: a 40-hex sha or a plain ref name (git check-ref-format's rules, stricter), so git never reads
  it as an option and no script or file quotes anything else;
- the interpreter `uv venv --python X` names: a version, never a path.
"""

from __future__ import annotations

import re
import shlex

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_SPEC = r"(?:===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+"
# A requirement by name: extras and version specifiers, no URL, no path, no marker (`;`).
_REQUIREMENT = re.compile(rf"^{_NAME}(?:\[{_NAME}(?:,{_NAME})*\])?(?:{_SPEC}(?:,{_SPEC})*)?$")
# pip reads these as files to install, not as names.
_ARCHIVE = re.compile(r"\.(whl|zip|tar|tgz|tbz|txz|tar\.gz|tar\.bz2|tar\.xz)$", re.IGNORECASE)
# Flags that change neither where packages come from nor where they go.
_FLAGS = {"--no-deps", "-U", "--upgrade", "--pre", "--no-cache-dir", "--force-reinstall", "--reinstall",
          "--ignore-installed", "-I", "-q", "--quiet", "-v", "--verbose", "--no-build-isolation"}
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_SHELL = set("();<>|&")
ONLY = "only pip installs of named packages"


def one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def install_argv(cmd: str) -> list[str]:
    """The argv of an install command that installs named packages with pip (`pip install`, `python -m pip
    install`, `uv pip install`) and nothing else; ValueError naming the command otherwise."""
    refused = ValueError(f"install command not allowed: `{one_line(cmd)}` ({ONLY})")
    if re.search(r"[^\x20-\x7e]|[$`\\]", cmd):  # control characters, expansions, escapes
        raise refused
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        argv = list(lexer)
    except ValueError:  # an unclosed quote
        raise refused from None
    if any(set(word) <= _SHELL for word in argv):  # ; && | > < ( ): shell, not an install
        raise refused
    if argv[:2] in (["pip", "install"], ["pip3", "install"]):
        args = argv[2:]
    elif argv[:3] == ["uv", "pip", "install"]:
        args = argv[3:]
    elif argv[:1] and _PYTHON.match(argv[0]) and argv[1:4] == ["-m", "pip", "install"]:
        args = argv[4:]
    else:
        raise refused
    names = [a for a in args if a not in _FLAGS]
    if not names or not all(_REQUIREMENT.match(a) and not _ARCHIVE.search(a) for a in names):
        raise refused
    return argv


def interpreter(version: str) -> str:
    """`uv venv --python X`'s X as `[setup] python`: a version (3.11 -> python3.11) or pythonX.Y / pypyX.Y,
    which is looked up on PATH; never a path (the task file's folder is the record's)."""
    if re.fullmatch(r"\d+(\.\d+){0,2}", version):
        return f"python{version}"
    if re.fullmatch(r"(python|pypy)\d+(\.\d+){0,2}", version):
        return version
    raise ValueError("--python must name a version, e.g. 3.11")


_URL = re.compile(r"^(?:(?:https?|ssh|git)://(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+(?::\d+)?/|git@[A-Za-z0-9.-]+:"
                  r"|file:///)[A-Za-z0-9._/~+-]+$")


def repo_url(url: str) -> str:
    """A record's repository URL: https, http, ssh, git or file, or scp-like `git@host:path`; never a transport
    that runs a program (`ext::`, `fd::`), or text git could read as an option."""
    if not _URL.match(url) or ".." in url:
        raise ValueError(f"repo: {one_line(url)!r} is not a plain https, ssh or git URL")
    return url


def base_ref(base: str) -> str:
    """A record's base commit as the task's `base`: a 40-hex sha, or a ref name that git check-ref-format
    accepts, without whitespace, quotes, backslashes or a leading `-`."""
    why = f"base_commit: {one_line(base)!r} is neither a 40-hex commit sha nor a plain ref name"
    if re.fullmatch(r"[0-9a-fA-F]{40}", base):
        return base
    if len(base) > 200 or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", base):
        raise ValueError(why)
    parts = base.split("/")
    if ".." in base or any(not p or p.startswith(".") or p.endswith((".lock", ".")) for p in parts):
        raise ValueError(why)
    return base
