"""Sphinx configuration: MyST markdown pages, built with -W in the test suite.

Nothing is loaded from the network and nothing outside pip is needed: the diagrams are SVG files
rendered from their DOT sources by ``tent spec diagram`` and checked in (a test checks that each
shows its source; see ``tent_models.rendering``), and the theme's assets are local files.
``tests/docs/test_docs_build.py`` fails on any external URL in the built HTML.
"""

import importlib
import inspect
import re

from sphinx.application import Sphinx

project = "TENT protocol library"
author = "TENT protocol team"
copyright = f"{author}, licensed under Apache-2.0"  # the footer; unset, it reads an empty "©."
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
myst_enable_extensions = ["colon_fence"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
# alabaster links Google Fonts by default; an air-gapped reader gets the local fallback fonts.
html_theme_options = {
    "font_family": "sans-serif",
    "head_font_family": "sans-serif",
    "page_width": "1160px",  # room for the state diagrams at a legible scale
}
suppress_warnings = ["myst.header"]

# The API reference documents each package's public names: its __all__, nothing private.
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_class_signature = "separated"
add_module_names = False

# No "powered by" links to sphinx-doc.org / alabaster: the built pages name no external URL.
html_show_sphinx = False
html_theme_options["show_powered_by"] = False


_PUBLIC_DATA = re.compile(r"^\.\. public-data:: (?P<module>[\w.]+)$", re.MULTILINE)


def _public_data(module_name: str) -> str:
    """``autodata`` lines for the constants and type aliases of a module's ``__all__``.

    ``automodule`` documents the classes and functions a package re-exports from its private
    modules, but not re-exported data (an int or an alias has no ``__module__`` to follow).
    """
    module = importlib.import_module(module_name)
    names = [
        name
        for name in module.__all__
        if not any(
            check(getattr(module, name))
            for check in (inspect.isclass, inspect.isroutine, inspect.ismodule)
        )
    ]
    return "\n".join(f".. autodata:: {module_name}.{name}" for name in names)


def _expand_public_data(app: Sphinx, docname: str, source: list[str]) -> None:
    del app, docname
    source[0] = _PUBLIC_DATA.sub(lambda m: _public_data(m.group("module")), source[0])


def setup(app: Sphinx) -> None:
    app.connect("source-read", _expand_public_data)
