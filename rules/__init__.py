"""Marks rules/ as the `rules` package so an installed accelpolicy finds its rule files as package data
(importlib.resources, runtime.rules.loader.installed_rules_dir). Holds no code: policy is the YAML here."""
