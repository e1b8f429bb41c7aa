"""Sphinx configuration: MyST markdown pages, built with -W in the test suite."""

project = "TENT protocol library"
author = "TENT protocol team"
extensions = ["myst_parser", "sphinxcontrib.mermaid"]
myst_enable_extensions = ["colon_fence"]
myst_fence_as_directive = ["mermaid"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
suppress_warnings = ["myst.header"]
