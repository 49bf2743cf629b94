"""The compiled-rules cache (docs/performance.md "Fast to start, light to hold"): a hit gives exactly what a compile gives, without parsing;
a damaged, truncated or foreign entry is ignored with one warning and the rules compiled again; rules
with a problem are never cached; the key follows the rule bytes, their names and the code."""
from __future__ import annotations

import marshal
import shutil
from pathlib import Path

import pytest

from runtime.model.rulefiles import Expr
from runtime.rules import compiledcache, loader
from runtime.rules.cel.compile import compile_expression
from runtime.rules.checks import _leaves
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules, rule_problems


@pytest.fixture()
def rules(tmp_path) -> Path:
    """A copy of the shipped rules (what the tests change stays here)."""
    target = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, target, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.py", "*.md"))
    return target


@pytest.fixture()
def store(tmp_path):
    warnings: list[str] = []
    cache = compiledcache.RulesCache(tmp_path / "cache", warn=warnings.append)
    cache.warnings = warnings
    return cache


def _exprs(spec):
    """Every (path, Expr) of a validated spec (the static checks' own walk)."""
    return [(path, value) for path, value in _leaves(spec, ()) if isinstance(value, Expr)]


def _fingerprint(ruleset) -> list:
    """Everything a load gives: each document's kind, name, file, line, linked spec, its source maps and
    every expression's text, origin and code."""
    out = []
    for (kind, name), doc in ruleset.documents.items():
        exprs = [(path, str(e), e.program.where, e.program.program.tp.executable_code) for path, e in _exprs(doc.spec)]
        out.append((kind, name, doc.file, doc.line, doc.spec.model_dump(), doc.source.value, doc.source.lines,
                    doc.source.spans, doc.source.text, exprs))
    return out


def _load(root: Path, cache) -> tuple:
    problems, ruleset = rule_problems(root, cache=cache)
    assert problems == []
    return _fingerprint(ruleset)


def _no_parsing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a load from the cache parsed or transpiled")

    monkeypatch.setattr(loader, "transpile", refuse)
    monkeypatch.setattr("runtime.rules.cel.parse.parse", refuse)
    monkeypatch.setattr("runtime.rules.yamlsrc.load_documents", refuse)
    monkeypatch.setattr(loader, "load_documents", refuse)


def test_a_hit_gives_what_a_compile_gives_without_parsing(rules, store, monkeypatch):
    fresh = _load(rules, None)
    assert not store.directory.exists()
    assert _load(rules, store) == fresh  # miss: compiles and writes the entry
    entries = list(store.directory.glob("*.rules"))
    assert len(entries) == 1
    _no_parsing(monkeypatch)
    assert _load(rules, store) == fresh  # hit
    assert store.warnings == []


def test_programs_from_the_cache_evaluate_like_compiled_ones(rules, store):
    rule_problems(rules, cache=store)
    _, cached = rule_problems(rules, cache=store)
    _, fresh = rule_problems(rules, cache=None)
    derivation_cached = cached.get("PoolDerivation")
    derivation_fresh = fresh.get("PoolDerivation")
    activation = {"name": "gpustack-nvidia-a10g", "entrancePrefix": "gpustack--"}
    assert derivation_cached.entrance.evaluate(activation) == derivation_fresh.entrance.evaluate(activation)
    assert derivation_cached.entrance.evaluate(activation).startswith("gpustack--")


def _entry(store) -> Path:
    [entry] = list(store.directory.glob("*.rules"))
    return entry


def _truncate(path: Path, other: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _flip_payload_byte(path: Path, other: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[len(blob) * 2 // 3] ^= 0x40
    path.write_bytes(bytes(blob))


def _flip_magic(path: Path, other: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[0] ^= 0x01
    path.write_bytes(bytes(blob))


def _empty(path: Path, other: Path) -> None:
    path.write_bytes(b"")


def _foreign(path: Path, other: Path) -> None:
    """The (valid) entry of other rules put under this key's name."""
    path.write_bytes(other.read_bytes())


def _wrong_shape(path: Path, other: Path) -> None:
    """A well-formed entry (checksum, format and key right) whose documents do not rebuild the rules."""
    data = marshal.loads(path.read_bytes()[len(compiledcache.MAGIC) + 32:])
    data["files"] = {name: marshal.dumps([({"kind": "Nonsense"}, 1, {}, {})]) for name in data["files"]}
    payload = marshal.dumps(data)
    import hashlib

    path.write_bytes(compiledcache.MAGIC + hashlib.sha256(payload).digest() + payload)


def _not_marshal(path: Path, other: Path) -> None:
    import hashlib

    payload = b"\xff\x00 not marshal"
    path.write_bytes(compiledcache.MAGIC + hashlib.sha256(payload).digest() + payload)


@pytest.mark.parametrize("damage", [_truncate, _flip_payload_byte, _flip_magic, _empty, _foreign, _wrong_shape,
                                    _not_marshal])
def test_a_damaged_or_foreign_entry_warns_once_and_changes_nothing(rules, store, tmp_path, damage):
    fresh = _load(rules, None)
    other_rules = tmp_path / "other" / "rules"
    shutil.copytree(rules, other_rules)
    (other_rules / "constants.yaml").write_text((other_rules / "constants.yaml").read_text() + "\n# another set\n")
    other_store = compiledcache.RulesCache(tmp_path / "other-cache")
    _load(other_rules, other_store)
    _load(rules, store)
    entry = _entry(store)
    damage(entry, next((tmp_path / "other-cache").glob("*.rules")))
    assert _load(rules, store) == fresh
    assert len(store.warnings) == 1, store.warnings
    assert store.warnings[0].startswith(f"compiled-rules cache entry {entry} ")
    assert store.warnings[0].endswith(": ignored, compiling the rules again")
    assert _load(rules, store) == fresh  # the entry was written again: a plain hit, no second warning
    assert len(store.warnings) == 1


def test_rules_with_a_problem_are_never_cached(rules, store):
    path = rules / "pools" / "derivation.yaml"
    path.write_text(path.read_text().replace("entrance: 'entrancePrefix + fnv64a(name)'",
                                             "entrance: 'entrancePrefix + fnv64a(nam)'"))
    uncached, _ = rule_problems(rules, cache=None)
    first, _ = rule_problems(rules, cache=store)
    second, _ = rule_problems(rules, cache=store)
    assert [str(p) for p in first] == [str(p) for p in second] == [str(p) for p in uncached]
    assert any("undeclared name 'nam'" in str(p) for p in first)
    assert not store.directory.exists() or list(store.directory.glob("*.rules")) == []


def test_the_key_follows_bytes_names_and_code(store, monkeypatch):
    base = store.key([("rules/a.yaml", b"x: 1\n")])
    assert store.key([("rules/a.yaml", b"x: 1\n")]) == base
    assert store.key([("rules/a.yaml", b"x: 2\n")]) != base
    assert store.key([("rules/b.yaml", b"x: 1\n")]) != base
    assert store.key([("rules/a.yaml", b"x: 1\n"), ("rules/b.yaml", b"")]) != base
    monkeypatch.setattr(compiledcache, "code_identity", lambda: b"another version")
    assert store.key([("rules/a.yaml", b"x: 1\n")]) != base


def test_an_edit_is_a_new_entry_and_a_revert_hits_the_old_one(rules, store, monkeypatch):
    original = _load(rules, store)
    constants = rules / "constants.yaml"
    text = constants.read_text()
    constants.write_text(text + "\n# edited\n")
    edited = _load(rules, store)
    assert len(list(store.directory.glob("*.rules"))) == 2
    constants.write_text(text)
    _no_parsing(monkeypatch)
    assert _load(rules, store) == original
    assert edited != original  # the comment moved nothing but the file's text


def test_an_unwritable_cache_directory_costs_nothing_but_time(rules, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory would be")
    warnings: list[str] = []
    store = compiledcache.RulesCache(blocker / "cache", warn=warnings.append)
    assert _load(rules, store) == _load(rules, None)
    assert warnings == []


def test_old_entries_are_pruned(store):
    store.directory.mkdir(parents=True)
    for i in range(compiledcache.KEEP + 5):
        assert store.save(f"{i:064x}", {"rules/a.yaml": marshal.dumps([])}, {}) is not None
    assert len(list(store.directory.glob("*.rules"))) == compiledcache.KEEP


def test_load_rules_and_the_environment(rules, tmp_path, monkeypatch):
    monkeypatch.setenv(compiledcache.ENV, str(tmp_path / "env-cache"))
    compiledcache.reset()
    load_rules(rules)
    assert len(list((tmp_path / "env-cache").glob("*.rules"))) == 1
    monkeypatch.setenv(compiledcache.ENV, "off")
    assert compiledcache.active() is None
    monkeypatch.delenv(compiledcache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiledcache.active().directory == tmp_path / "xdg" / "accelpolicy" / "rules"


def test_a_broken_set_still_refuses_with_a_warm_cache(rules, store, monkeypatch):
    _load(rules, store)
    (rules / "settings.yaml").write_text("kind: [\n")
    problems, _ = rule_problems(rules, cache=store)
    assert [str(p) for p in problems] == [str(p) for p in rule_problems(rules, cache=None)[0]]
    assert problems and problems[0].file == "rules/settings.yaml"
    monkeypatch.setenv(compiledcache.ENV, str(store.directory))
    with pytest.raises(RuleLoadError):
        load_rules(rules)


def test_cel_programs_share_one_read_only_base_activation():
    first = compile_expression("a + 1", "test")
    second = compile_expression("b", "test")
    assert first.program.tp.base_activation is second.program.tp.base_activation
    before = dict(first.program.tp.base_activation.identifiers)
    assert first.evaluate({"a": 2}, memo=False) == 3
    assert dict(first.program.tp.base_activation.identifiers) == before


def test_a_read_only_seed_directory_serves_and_the_first_directory_takes_new_entries(rules, tmp_path, monkeypatch):
    seed = tmp_path / "image-cache"
    _load(rules, compiledcache.RulesCache(seed))  # what the image build does for its rules
    seed.chmod(0o555)
    try:
        monkeypatch.setenv(compiledcache.ENV, f"{tmp_path / 'writable'}:{seed}")
        store = compiledcache.active()
        assert (store.directory, store.read_also) == (tmp_path / "writable", (seed,))
        with monkeypatch.context() as m:
            _no_parsing(m)
            problems, _ = rule_problems(rules, cache=store)  # a hit from the seed: nothing parsed
            assert problems == []
        assert not (tmp_path / "writable").exists()
        (rules / "constants.yaml").write_text((rules / "constants.yaml").read_text() + "\n# edited\n")
        _load(rules, store)
        assert len(list((tmp_path / "writable").glob("*.rules"))) == 1
        assert len(list(seed.glob("*.rules"))) == 1
    finally:
        seed.chmod(0o755)
