"""Which directories the caches trust (theanompi.core.private_paths): the user's own, writable by nobody else,
under parents nobody else can swap. Modes are set on temporary directories; another owner is a chown (root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from theanompi.core.private_paths import make_private_dir, untrusted_tree

OTHER_UID = 54321


def _entry(root: Path) -> Path:
    (root / "functions").mkdir()
    entry = root / "functions" / "k.pkl"
    entry.write_bytes(b"x")
    return entry


#: case -> (arrange tmp_path/"parent"/"cache", fragment of the reason or None when trusted)
CASES = {
    "private, made here": (lambda root: None, None),
    "0755 with entries nobody else may write": (lambda root: (root.chmod(0o755), _entry(root).chmod(0o644)), None),
    "private root, a group-writable entry inside (nobody else reaches it)":
        (lambda root: _entry(root).chmod(0o664), None),
    "root writable by others": (lambda root: root.chmod(0o777), "cache is writable by group and others (mode 0777)"),
    "root writable by its group": (lambda root: root.chmod(0o770), "cache is writable by group (mode 0770)"),
    "an entry writable by its group under a reachable root":
        (lambda root: (root.chmod(0o755), _entry(root).chmod(0o664)), "k.pkl is writable by group (mode 0664)"),
    "an entry of another user": (lambda root: os.chown(_entry(root), OTHER_UID, -1),
                                 f"k.pkl is owned by uid {OTHER_UID}, not by this user"),
    "a parent anyone may write to": (lambda root: root.parent.chmod(0o777),
                                     "parent is writable by group and others (mode 0777)"),
    "a sticky parent anyone may write to, like /tmp": (lambda root: root.parent.chmod(0o1777), None),
    "a parent of another user": (lambda root: os.chown(root.parent, OTHER_UID, -1),
                                 f"parent is owned by uid {OTHER_UID}, not by this user"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cache_directory_is_trusted_only_if_nobody_else_can_change_it(tmp_path, case):
    if "another user" in case and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    root = tmp_path / "parent" / "cache"
    make_private_dir(root)
    arrange, fragment = CASES[case]
    arrange(root)
    reason = untrusted_tree(root)
    if fragment is None:
        assert reason is None, reason
    else:
        assert reason is not None and fragment in reason, reason


def test_a_link_to_the_cache_must_be_the_users_own(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("lchown to another user needs root")
    root = tmp_path / "real"
    make_private_dir(root)
    link = tmp_path / "link"
    link.symlink_to(root)
    assert untrusted_tree(link) is None
    os.lchown(link, OTHER_UID, -1)
    assert f"link is owned by uid {OTHER_UID}" in (untrusted_tree(link) or "")
