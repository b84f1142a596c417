"""Reading a diff's text: what git cannot read as a diff is said in git's words, before anything is applied."""

from __future__ import annotations

import pytest

from agent.checks.patchinfo import changes_anything, unreadable

GOOD = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n"


@pytest.mark.parametrize("text, why", [
    ("hello world\n", "No valid patches in input"),
    ("diff --git a/x b/x\n", "No valid patches in input"),  # a header alone
    (GOOD.split("-b\n")[0], "corrupt patch at line 6"),  # cut short inside its hunk: nothing removed or added
])
def test_text_that_is_no_diff_gets_gits_reason(text, why):
    assert unreadable(text) == why
    assert not changes_anything(text)  # what used to make it a change of nothing


@pytest.mark.parametrize("text", [
    "", "  \n",  # empty: no change, not no diff
    GOOD,
    "--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n",  # a plain unified diff, no git header
    "diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n",  # an empty new file
    "diff --git a/x b/x\nold mode 100644\nnew mode 100755\n",
    "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-b \n+b\n",  # trailing spaces only
])
def test_a_diff_git_reads_is_not_refused(text):
    assert unreadable(text) is None
