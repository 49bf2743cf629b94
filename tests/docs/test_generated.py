"""The generated reference pages (docs/reference/) equal what docs/gen.py makes from the code now."""
from __future__ import annotations

import subprocess
import sys

from docs import gen
from tests.docs.examples import ROOT


def test_generated_reference_pages_are_current():
    stale = [p.relative_to(ROOT).as_posix() for p in gen.stale()]
    assert not stale, f"stale generated pages {stale}: run `{gen.REGENERATE}` (python -m docs.gen) and commit them"


def test_check_mode_names_the_stale_page_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    (tmp_path / "settings.md").write_text("old\n")
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert (tmp_path / "settings.md").read_text() == gen.settings_page()
    assert gen.main(["--check"]) == 0


def test_check_mode_message(tmp_path):
    run = subprocess.run([sys.executable, "-c", "import sys; from docs import gen; from pathlib import Path; "
                          f"gen.REFERENCE = Path({str(tmp_path)!r}); sys.exit(gen.main(['--check']))"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1
    assert "cli.md is stale: run `make docs-gen`" in run.stderr


def test_cli_page_has_every_command():
    from runtime.cli import main

    page = gen.cli_page()
    for name in main.list_commands(None):
        assert f"## `accelpolicy {name}`" in page


def test_settings_page_has_every_setting_with_its_default():
    import yaml

    page = gen.settings_page()
    for setting in yaml.safe_load((ROOT / "rules/settings.yaml").read_text())["spec"]["settings"]:
        assert f"| `{setting['name']}` | {setting['type']} | `{setting['default']}` |" in page


def test_metrics_page_lists_the_webhook_collectors():
    page = gen.metrics_page()
    assert "| `accelpolicy_admission_reviews` | counter | accelpolicy_admission_reviews_total | `webhook`, `verdict` |" in page
    assert "| `accelpolicy_admission_review_seconds` | histogram |" in page


def test_rule_kinds_page_shows_a_field_with_type_default_and_description():
    page = gen.rule_kinds_page()
    assert "## `PresetTable`" in page and "Used by: `rules/pools/presets.yaml`." in page
    assert "| `sharedOnceMaxReading` | `shareSum` \\| `acceleratorCount` | `shareSum` |" in page
    assert "| `creditsPerAccelerator` | int | required | D: credits of one whole accelerator (> 0) |" in page


def test_crds_page_shows_nested_fields():
    page = gen.crds_page()
    assert "| `spec.groups[].id` | string | yes | group ID without the manufacturer prefix, e.g. a10g |" in page
