"""Test harness kept beside the tests, outside the product wheel: the local control plane
(:mod:`testing.localcluster`) and test-only subclasses of product classes (:mod:`testing.hooks`)."""
