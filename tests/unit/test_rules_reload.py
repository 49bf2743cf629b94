"""Hot reload of a rules directory mounted the way kubelet mounts a ConfigMap (docs/rule-authoring.md "4. Hot reload").

kubelet writes each version into ``..<timestamp>/``, points ``..data`` at it with one rename, and
the visible files are symlinks ``name -> ..data/name``. The watcher must see the swap, load the new
set as a new generation, refuse a broken set with its file:line:col problems and keep the old one."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.reload.watcher import RulesWatcher, content_hash
from runtime.snapshots import load_snapshot

SEED = "tests/fixtures/seed/common"


def _version(mount: Path, stamp: str, edit=None) -> None:
    """Write a new ``..stamp`` version (a copy of the rules, optionally edited) and swap ``..data`` to it."""
    target = mount / f"..{stamp}"
    shutil.copytree(DEFAULT_RULES_DIR, target, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.py", "*.md"))
    if edit:
        edit(target)
    tmp = mount / "..data_tmp"
    os.symlink(target.name, tmp)
    os.replace(tmp, mount / "..data")
    for entry in sorted(os.listdir(mount / "..data")):
        link = mount / entry
        if not link.is_symlink():
            os.symlink(f"..data/{entry}", link)


@pytest.fixture()
def mount(tmp_path) -> Path:
    m = tmp_path / "rules"
    m.mkdir()
    _version(m, "2026_12_01_00_00_00.1")
    return m


def _entrance_of(target: Path, new: str) -> None:
    path = target / "pools" / "derivation.yaml"
    text = path.read_text()
    old = "entrance: 'entrancePrefix + fnv64a(name)'"
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


def test_a_configmap_symlink_swap_is_a_new_generation(mount):
    swapped = []
    watcher = RulesWatcher(mount, swapped.append)
    first = watcher.current
    # every rule file, read through the kubelet's ..data link, named as in the checkout
    assert {doc.file for doc in first.documents.values()} == {doc.file for doc in load_rules().documents.values()}
    assert watcher.poll() is None  # nothing changed
    _version(mount, "2026_12_01_00_01_00.2",
             lambda t: _entrance_of(t, "entrance: '\"gpustack-q-\" + fnv64a(name)'"))
    assert watcher.poll() is True
    assert swapped == [watcher.current] and watcher.current.generation > first.generation
    a10g = [it for it in derive(Policy(watcher.current), load_snapshot([SEED])).instance_types
            if it["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64"][0]
    assert a10g["status"]["entrance"] == "gpustack-q-c4680bb149644f1c"


def test_a_broken_set_is_refused_and_the_working_generation_stays(mount):
    refused = []
    watcher = RulesWatcher(mount, lambda rs: pytest.fail("a broken set was swapped in"), refused.append)
    working = watcher.current
    _version(mount, "2026_12_01_00_02_00.3", lambda t: _entrance_of(t, "entrance: '\"gpustack-q-\" + fnv64b(name)'"))
    assert watcher.poll() is False
    assert watcher.current is working and watcher.failures == 1
    text = (mount / "pools" / "derivation.yaml").read_text()
    line = text[: text.index("\n  entrance: ")].count("\n") + 2
    assert [str(p) for p in refused[0].problems] == [
        f"rules/pools/derivation.yaml:{line}:30 spec.entrance: unknown function 'fnv64b'"]
    assert watcher.poll() is None  # the same broken content is not reloaded again


def test_the_content_hash_reads_through_the_symlinks_once(mount):
    before = content_hash(mount)
    assert before == content_hash(mount)
    # the visible names and the ..<timestamp> copy are one set of files: load_rules sees no duplicates
    assert load_rules(mount).generation > 0
    _version(mount, "2026_12_01_00_03_00.4")  # same content, new version directory
    assert content_hash(mount) == before


def test_a_swap_while_the_watcher_reads_is_one_reload(mount, monkeypatch):
    """The CI flake of test_rules_as_data (2 reloads for one edit): the swap landed between the
    watcher's content hash and its load, so it loaded the new set under a hash of neither and
    loaded it again on the next check. Now the check that saw the files move loads nothing, and the
    next one loads the new set once."""
    import runtime.reload.watcher as reload_module

    swapped = []
    watcher = RulesWatcher(mount, swapped.append)
    edit = lambda t: _entrance_of(t, "entrance: '\"gpustack-q-\" + fnv64a(name)'")  # noqa: E731
    _version(mount, "2026_12_01_00_03_00.4", edit)
    real_load = reload_module.load_rules

    def load_during_a_second_swap(root):
        monkeypatch.setattr(reload_module, "load_rules", real_load)
        _version(mount, "2026_12_01_00_03_01.5", edit)   # the same content, moved once more
        return real_load(root)

    monkeypatch.setattr(reload_module, "load_rules", load_during_a_second_swap)
    monkeypatch.setattr(reload_module, "content_hash", _once_torn(reload_module.content_hash))
    assert watcher.poll() is None           # the files moved while read: nothing swapped in
    assert watcher.poll() is True           # they hold still: loaded once
    assert watcher.poll() is None
    assert watcher.reloads == 1 and len(swapped) == 1


def _once_torn(real):
    """``content_hash`` whose first answer is torn (as a read straddling a swap is), then the real one."""
    calls = []

    def content_hash_(root):
        calls.append(root)
        return "torn" if len(calls) == 1 else real(root)
    return content_hash_


def test_a_set_with_a_type_error_is_refused_at_reload(mount):
    """The type check is part of every load (docs/rule-authoring.md "What lint checks"): a message that
    adds an int to a string, which cel-python would answer with a 500 on every review, is never swapped in."""
    refused = []
    watcher = RulesWatcher(mount, lambda rs: pytest.fail("a set with a type error was swapped in"), refused.append)
    working = watcher.current

    def message(target: Path) -> None:
        path = target / "pools" / "derivation.yaml"
        text = path.read_text()
        old = "entrance: 'entrancePrefix + fnv64a(name)'"
        path.write_text(text.replace(old, "entrance: 'entrancePrefix + size(name)'"))

    _version(mount, "2026_12_01_00_03_00.4", message)
    assert watcher.poll() is False
    assert watcher.current is working and watcher.failures == 1
    text = (mount / "pools" / "derivation.yaml").read_text()
    line = text[: text.index("\n  entrance: ")].count("\n") + 2
    assert [str(p) for p in refused[0].problems] == [
        f"rules/pools/derivation.yaml:{line}:14 spec.entrance: type mismatch: no '+' for (string, int) in "
        "'entrancePrefix + size(name)'"]
