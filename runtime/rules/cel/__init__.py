"""CEL: parse, check, compile and evaluate the expressions of rules/ (the stages: docs/architecture.md)."""
