"""An isolated git workspace per run: the task's repo at `base`, on a branch of its own.

Every git command perfagent runs obeys no one else's configuration (`GIT_ENV`): no system or
global config, no hooks, no fsmonitor, no filter, textconv, diff or merge drivers. The agent
works in these folders, so anything it could plant (a `.gitattributes`, a nested repo's
config, `git config --global`) must never make the harness's own git run a program.

A local git repo is cloned with `--shared` (objects borrowed through alternates, never
copied) so setup costs one checkout even on large repos; a URL is cloned; a plain folder
becomes a fresh repo with one baseline commit. The user's repo and working tree are only
ever read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from agent.env.candidate import Candidate, LeftOut, staged_reason, untracked_reason
from agent.task import Task, TaskError
from agent.util.globs import matches_any
from agent.errors import BadInput

RUN_BRANCH = "perfagent/run"
# Never part of a baseline snapshot of a plain folder, nor of a candidate.
DEFAULT_EXCLUDES = ["__pycache__/", "*.pyc", ".pytest_cache/", ".coverage*", "*.egg-info/"]
_AUTHOR = {"GIT_AUTHOR_NAME": "perfagent", "GIT_AUTHOR_EMAIL": "perfagent@localhost",
           "GIT_COMMITTER_NAME": "perfagent", "GIT_COMMITTER_EMAIL": "perfagent@localhost"}
# Settings passed as GIT_CONFIG_KEY_n/VALUE_n outrank every config file, the repo's own included.
_FORCED_CONFIG = {
    "core.hooksPath": "/dev/null", "core.fsmonitor": "false", "core.attributesFile": "/dev/null",
    "core.pager": "cat", "diff.ignoreSubmodules": "all", "submodule.recurse": "false",
    "protocol.ext.allow": "never", "gc.auto": "0", "maintenance.auto": "false", "safe.directory": "*",
}
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": str(len(_FORCED_CONFIG)),
    **{f"GIT_CONFIG_KEY_{i}": k for i, k in enumerate(_FORCED_CONFIG)},
    **{f"GIT_CONFIG_VALUE_{i}": v for i, v in enumerate(_FORCED_CONFIG.values())},
}
# $GIT_DIR/info/attributes outranks every .gitattributes in the tree: no filter, diff or merge
# driver a committed or planted attribute file names is ever looked up.
NEUTRAL_ATTRIBUTES = "* !filter !diff !merge\n"


class WorkspaceError(BadInput):
    """The repo cannot be turned into a workspace (missing, unknown base, clone failed)."""


class PatchError(BadInput):
    """A patch that does not apply; the message is git's reason, in one line."""


@dataclass
class Workspace:
    root: Path
    base_commit: str

    @property
    def repo(self) -> git.Repo:
        return open_repo(self.root)

    @classmethod
    def create(cls, source: str | Path, base: str = "HEAD", dest: str | Path | None = None) -> Workspace:
        """Materialise `source` at `base` in `dest` (a new temp folder when None)."""
        dest = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="perfagent-ws-"))
        if dest.exists() and any(dest.iterdir()):
            raise WorkspaceError(f"workspace folder is not empty: {dest}")
        src = str(source)
        try:
            if "://" in src or src.startswith("git@"):
                _git("clone", "--quiet", "--no-checkout", "--", src, str(dest))
            else:
                path = Path(src).expanduser().resolve()
                if not path.is_dir():
                    raise WorkspaceError(f"repo not found: {src}")
                if _is_repo_root(path):
                    _git("clone", "--quiet", "--shared", "--no-checkout", "--", str(path), str(dest))
                else:
                    _snapshot_folder(path, dest)
            _protect_git_dir(dest / ".git")
            repo = open_repo(dest)
            try:
                commit = repo.commit(base).hexsha
            except (git.BadName, ValueError):
                raise WorkspaceError(f"unknown base commit {base!r} in {src}") from None
            repo.git.checkout("--quiet", "--force", "-B", RUN_BRANCH, commit)
        except git.GitCommandError as e:
            shutil.rmtree(dest, ignore_errors=True)
            raise WorkspaceError(f"cannot create workspace from {src}: {_one_line(e.stderr)}") from None
        except WorkspaceError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return cls(root=dest, base_commit=commit)

    # -- reading the candidate ------------------------------------------------------------
    def _stage_all(self) -> list[LeftOut]:
        """Stage the working tree but for the untracked files no candidate holds (too large, named like our
        outputs): those are returned, and never hashed into git."""
        skipped: list[LeftOut] = []
        excludes: list[str] = []
        for path in self._untracked():
            size = self._size(path)
            reason = untracked_reason(path, size)
            if reason is not None:
                skipped.append(_left_out(path, size, reason))
                excludes.append(f":(exclude,literal){path}")
        self._run_git(["add", "--all"], [".", *excludes])
        return skipped

    def candidate(self) -> Candidate:
        """The change to grade and to emit: the working tree's source changes against base (untracked files
        included), and the files left out of it (binary, new and over the size limit, named like our outputs;
        `agent.env.candidate`). A left-out file stays in the working tree; it is only never staged."""
        left_out = self._stage_all()
        new = set(self._z("diff", "--cached", "--name-only", "-z", "--no-renames", "--diff-filter=A",
                          self.base_commit))
        taken_back: list[str] = []
        for entry in self._z("diff", "--cached", "--numstat", "-z", "--no-renames", "--no-ext-diff", "--no-textconv",
                             self.base_commit):
            added, _, path = entry.split("\t", 2)
            size = self._size(path)
            reason = staged_reason(path, binary=added == "-", new=path in new, size=size)
            if reason is not None:
                left_out.append(_left_out(path, size, reason))
                taken_back.append(path)
        if taken_back:  # the index holds base's version again (none, for a new file); the tree keeps its own
            self._run_git(["reset", "--quiet", self.base_commit], [f":(literal){p}" for p in taken_back])
        text = self.repo.git.diff("--cached", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                                  self.base_commit)
        text = text + "\n" if text and not text.endswith("\n") else text
        return Candidate(text, sorted(left_out, key=lambda x: x.path))

    def diff(self) -> str:
        """The candidate's diff: what is graded and what is emitted (`candidate` also says what was left out)."""
        return self.candidate().diff

    def _untracked(self) -> list[str]:
        """Untracked files that no exclude or .gitignore hides (a nested repo's folder is not one)."""
        return [p for p in self._z("ls-files", "-z", "--others", "--exclude-standard") if not p.endswith("/")]

    def _size(self, path: str) -> int:
        """A file's size in bytes: the working tree's, else (deleted) base's."""
        try:
            return os.lstat(self.root / path).st_size
        except OSError:
            try:
                return int(self.repo.git.cat_file("-s", f"{self.base_commit}:{path}"))
            except (git.GitCommandError, ValueError):
                return 0

    def _z(self, *args: str) -> list[str]:
        """A git command's NUL-separated output, as paths (never quoted)."""
        out = self._run_git(list(args))
        return [p for p in out.decode("utf-8", errors="surrogateescape").split("\0") if p]

    def _run_git(self, args: list[str], pathspecs: list[str] | None = None) -> bytes:
        """Run git in the workspace; `pathspecs` go through stdin (NUL-separated: any name, any number)."""
        if pathspecs is not None:
            args = [*args, "--pathspec-from-file=-", "--pathspec-file-nul"]
        stdin = "\0".join(pathspecs).encode("utf-8", errors="surrogateescape") if pathspecs is not None else None
        proc = subprocess.run(["git", *args], cwd=self.root, input=stdin, capture_output=True, env=git_env(),
                              check=False)
        if proc.returncode != 0:
            raise git.GitCommandError(["git", *args], proc.returncode, proc.stderr)
        return proc.stdout

    def changed_files(self) -> list[str]:
        self._stage_all()
        out = self.repo.git.diff("--cached", "--name-only", "--no-renames", "--no-ext-diff", "--no-textconv",
                                 self.base_commit)
        return [line for line in out.splitlines() if line]

    def protected_changes(self, patterns: list[str]) -> list[str]:
        return [f for f in self.changed_files() if matches_any(f, patterns)]

    # -- changing the candidate -----------------------------------------------------------
    def snapshot(self, message: str = "candidate") -> str:
        """Commit the current state on the run branch; returns the commit sha."""
        self._stage_all()
        self.repo.git.commit("--quiet", "--allow-empty", "--no-verify", "-m", message, env=_AUTHOR)
        return self.repo.head.commit.hexsha

    def reset(self, commit: str | None = None) -> None:
        """Back to base (or to a snapshot): tracked files restored, untracked ones removed."""
        self.repo.git.reset("--quiet", "--hard", commit or self.base_commit)
        self.repo.git.clean("-fdq")

    def scrub(self) -> bool:
        """Back to base with nothing else left, ignored files included; False if it will not come clean."""
        try:
            self.repo.git.reset("--quiet", "--hard", self.base_commit)
            self.repo.git.clean("-ffdxq")
            return not self.repo.git.status("--porcelain", "--ignored", "--untracked-files=all").strip()
        except git.GitCommandError:
            return False

    def restore_paths(self, patterns: list[str], commit: str | None = None) -> list[str]:
        """Put the base version of every changed path matching `patterns` back; returns them."""
        restored = self.protected_changes(patterns)
        base = commit or self.base_commit
        base_files = set(self.repo.git.ls_tree("-r", "--name-only", base).splitlines())
        for f in restored:
            if f in base_files:
                self.repo.git.checkout(base, "--", f)
            else:
                self.repo.git.rm("--quiet", "--cached", "--force", "--ignore-unmatch", "--", f)
                (self.root / f).unlink(missing_ok=True)
        return restored

    def apply_patch(self, patch: str) -> list[str]:
        """Apply a unified diff to the working tree; PatchError (and no change) when it won't.

        Returns the paths the patch writes (`patch_paths`), each staged whatever an exclude or a
        .gitignore says: what is applied is what is judged, so no exclude hides a file a patch wrote.
        """
        if not patch.strip():
            return []
        for args in (["--check"], []):
            proc = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", *args, "-"],
                cwd=self.root, input=patch.encode(), capture_output=True, env=git_env(), check=False,
            )
            if proc.returncode != 0:
                raise PatchError(_one_line(proc.stderr.decode(errors="replace")) or "patch does not apply")
        paths = patch_paths(patch, self.root)
        present = [p for p in paths if (self.root / p).is_file() or (self.root / p).is_symlink()]
        if present:
            self.repo.git.add("--force", "--", *present)
        return paths

    def unstaged(self, paths: list[str]) -> list[str]:
        """Those of `paths` (a patch's, from `apply_patch`) that the staged change does not show."""
        staged = set(self.changed_files())
        return [p for p in paths if p not in staged]

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def patch_paths(patch: str, cwd: Path | None = None) -> list[str]:
    """Every path a unified diff writes or deletes, as `git apply --numstat` reads the patch (the new
    name of a rename). PatchError when git cannot read it."""
    proc = subprocess.run(["git", "apply", "--numstat", "-z", "-"], cwd=cwd, input=patch.encode(),
                          capture_output=True, env=git_env(), check=False)
    if proc.returncode != 0:
        raise PatchError(_one_line(proc.stderr.decode(errors="replace")) or "patch cannot be read")
    # -z: "added\tdeleted\tpath\0", or for a rename "added\tdeleted\t\0old\0new\0"
    fields = proc.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    out: list[str] = []
    i = 0
    while i < len(fields):
        head = fields[i]
        if not head:
            i += 1
            continue
        path = head.split("\t", 2)[2] if head.count("\t") >= 2 else ""
        if path:
            out.append(path)
            i += 1
        else:
            out += fields[i + 1:i + 3]
            i += 3
    return list(dict.fromkeys(p for p in out if p))


def check_base_commit(repo: str | Path, base: str) -> None:
    """`base` names a commit of the local `repo`; WorkspaceError in one line if not.

    A plain folder only knows its current state, so there only "HEAD" is a base. A URL is not
    looked at: cloning it is where its base is found, or not (`Workspace.create`).
    """
    path = Path(repo)
    if not (path / ".git").exists():
        if base != "HEAD":
            raise WorkspaceError(f"{path} is not a git repository, so only base = \"HEAD\" is possible")
        return
    try:
        open_repo(path).commit(base).tree  # noqa: B018 - a full sha is taken on trust until its object is read
    except (git.BadName, ValueError, git.GitCommandError, git.InvalidGitRepositoryError):
        raise WorkspaceError(f"unknown commit {base!r} in {path}") from None


def check_task_base(task: Task) -> None:
    """The task's base exists in its (local) repo: asked before a run, a check or a batch uses the task.

    TaskError naming the file and the field, like every other mistake in a task file.
    """
    if task.repo_is_url:
        return
    try:
        check_base_commit(task.repo, task.spec.base)
    except WorkspaceError as e:
        raise TaskError(f"{_shown(task.file)}: base: {e}") from None


def checked_bases(entries: list[Task | TaskError]) -> list[Task | TaskError]:
    """A task set's entries with each task whose base is unknown replaced by that TaskError."""
    out: list[Task | TaskError] = []
    for entry in entries:
        if isinstance(entry, Task):
            try:
                check_task_base(entry)
            except TaskError as e:
                entry = e
        out.append(entry)
    return out


def _shown(file: Path) -> str:
    """A task file as a user names it: relative to the current folder when inside it."""
    try:
        return str(file.relative_to(Path.cwd()))
    except ValueError:
        return str(file)


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a git subprocess: ours, with `GIT_ENV` on top."""
    return {**os.environ, **GIT_ENV, **(extra or {})}


def open_repo(path: str | Path) -> git.Repo:
    """A gitpython Repo whose every git command runs with `GIT_ENV`."""
    repo = git.Repo(path)
    repo.git.update_environment(**GIT_ENV)
    return repo


def _left_out(path: str, size: int, reason: str) -> LeftOut:
    """A left-out file as report.json can hold it: a name that is not UTF-8 is shown with replacement marks."""
    shown = path.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
    return LeftOut(path=shown, size=size, reason=reason)


def _protect_git_dir(git_dir: Path) -> None:
    """Our excludes, and attributes that switch off every driver a tracked .gitattributes names."""
    (git_dir / "info").mkdir(parents=True, exist_ok=True)
    (git_dir / "info" / "exclude").write_text("\n".join(DEFAULT_EXCLUDES) + "\n")
    (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
    shutil.rmtree(git_dir / "hooks", ignore_errors=True)


def _is_repo_root(path: Path) -> bool:
    try:
        return Path(open_repo(path).working_tree_dir).resolve() == path
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False


def _snapshot_folder(src: Path, dest: Path) -> None:
    """A plain folder becomes a new repo whose first commit is the folder as it is now.

    git reads the folder as an external work tree, so nothing is written into it; the
    folder's own .gitignore files still apply.
    """
    _git("init", "--quiet", str(dest))
    _protect_git_dir(dest / ".git")
    g = open_repo(dest).git
    g.execute(["git", f"--git-dir={dest / '.git'}", f"--work-tree={src}", "add", "--all", "--", "."])
    g.execute(["git", f"--git-dir={dest / '.git'}", "commit", "--quiet", "--no-verify", "-m", f"baseline: {src.name}"],
              env=_AUTHOR)


def _git(*args: str) -> None:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=git_env(), check=False)
    if proc.returncode != 0:
        raise git.GitCommandError(["git", *args], proc.returncode, proc.stderr)


def _one_line(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    lines = [ln.removeprefix("stderr: ").strip("'").strip() for ln in lines]
    return "; ".join(lines[:3])
