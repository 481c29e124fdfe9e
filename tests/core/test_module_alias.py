"""AliasFinder's rule (an entry maps a module and the modules under it, ``X.*`` only those under X, the longest
matching entry wins) and where :func:`install` puts a finder."""

import sys

import pytest

from theanompi.core.module_alias import AliasFinder, install

TABLE = {
    "old": "new",
    "old.*": "new.sub.*",
    "old.kept": "new.kept",
    "other": "elsewhere.other",
}


@pytest.mark.parametrize("name, target", [
    ("old", "new"),                              # the package itself
    ("old.a", "new.sub.a"),                      # a module under it: the X.* entry, longer than "old"
    ("old.a.b.Name", "new.sub.a.b.Name"),        # deeper, and a name inside a module
    ("old.kept", "new.kept"),                    # an exact entry longer than the X.* one
    ("old.kept.inner", "new.kept.inner"),        # and the modules under it
    ("other.x", "elsewhere.other.x"),            # an entry without X.*: the modules under it follow it
    ("older", None),                             # a name that only starts with the same letters
    ("old2.a", None),
    ("ol", None),
])
def test_the_longest_matching_entry_wins(name, target):
    assert AliasFinder(TABLE).target_name(name) == target


def test_a_children_only_entry_leaves_the_package_to_another_entry():
    finder = AliasFinder({"old.*": "new.*"})
    assert finder.target_name("old") is None and finder.target_name("old.x") == "new.x"


def test_install_appends_or_puts_first_and_is_idempotent(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    last, first = AliasFinder({"a_demo": "json"}), AliasFinder({"b_demo": "json"})
    assert install(last) is last and sys.meta_path[-1] is last
    assert install(first, first=True) is first and sys.meta_path[0] is first
    assert install(AliasFinder({"a_demo": "json"})) is last  # the same aliases: the finder already there
    assert sum(isinstance(f, AliasFinder) and f.aliases == {"a_demo": "json"} for f in sys.meta_path) == 1
