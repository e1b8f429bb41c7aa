"""Model checker, model configurations, z3 proofs, conformance runner and the ``tent`` CLI."""
