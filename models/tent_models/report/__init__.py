"""Counterexamples and traces a designer can look at: sequence charts, an offline HTML report
and the Informal Trace Format (docs/charts.md).

* :mod:`~tent_models.report._lifelines`: the model's chart hook (``lifelines`` / ``locate``),
  with a one-lifeline fallback for a model that declares none.
* :class:`Chart`: one trace as lifelines and rows (:func:`counterexample_chart`,
  :func:`witness_chart`, :func:`itf_chart`, :func:`recorded_chart`), drawn by :func:`svg`.
* :func:`check_page` / :func:`trace_page` and :func:`write_html`: ``tent check --html`` and
  ``tent trace validate --html``, one self-contained page (no script, nothing from the network).
* ITF: :func:`itf_document` and :func:`write_itf_traces` (``tent check --itf``), :func:`read_itf`
  and :func:`validate_itf` (``tent trace validate FILE.itf.json``).
"""

from tent_models.report._chart import Chart, Closing, Row, counterexample_chart, witness_chart
from tent_models.report._check import check_page, write_itf_traces
from tent_models.report._html import Figure, Page, Section
from tent_models.report._html import write as write_html
from tent_models.report._itf import (
    ItfError,
    ItfTrace,
    canonical,
    decode,
    encode,
    itf_document,
    read_itf,
)
from tent_models.report._itf_check import ItfReport, itf_chart, validate_itf
from tent_models.report._lifelines import (
    DELIVER,
    DUPLICATE,
    KINDS,
    LOCAL,
    LOSE,
    SEND,
    ChartError,
    Placement,
    declares_lifelines,
    lifelines,
    placements,
)
from tent_models.report._recorded import recorded_chart
from tent_models.report._svg import svg
from tent_models.report._trace_page import (
    itf_section,
    recorded_section,
    trace_page,
    unreadable_section,
)

__all__ = [
    "DELIVER",
    "DUPLICATE",
    "KINDS",
    "LOCAL",
    "LOSE",
    "SEND",
    "Chart",
    "ChartError",
    "Closing",
    "Figure",
    "ItfError",
    "ItfReport",
    "ItfTrace",
    "Page",
    "Placement",
    "Row",
    "Section",
    "canonical",
    "check_page",
    "counterexample_chart",
    "declares_lifelines",
    "decode",
    "encode",
    "itf_chart",
    "itf_document",
    "itf_section",
    "lifelines",
    "placements",
    "read_itf",
    "recorded_chart",
    "recorded_section",
    "svg",
    "trace_page",
    "unreadable_section",
    "validate_itf",
    "witness_chart",
    "write_html",
    "write_itf_traces",
]
