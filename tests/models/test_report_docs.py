"""The spec-review pages show each known-bad variant's counterexample as a generated chart, and
the checked-in charts are what ``tent spec charts`` draws today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_models.cli import main
from tent_models.report import _docs
from tent_models.report._html import slug

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHARTS = DOCS / "charts" / "known_bad"
PAGES = {
    "credit": "spec_review_credit.md",
    "gated": "spec_review_gated.md",
    "admission": "spec_review_admission.md",
}


def test_every_known_bad_variant_has_its_chart_on_its_spec_review_page() -> None:
    for name, _factory, _invariant in _docs.known_bad():
        family = name.split("/")[0]
        page = (DOCS / PAGES[family]).read_text(encoding="utf-8")
        image = f"charts/known_bad/{slug(name)}.svg"
        assert f"]({image})" in page, f"{PAGES[family]} does not show {image}"
        assert (DOCS / image).is_file(), image
    shown = {
        m
        for p in PAGES.values()
        for m in re.findall(r"\]\(charts/known_bad/([^)]+)\)", (DOCS / p).read_text("utf-8"))
    }
    assert shown == {p.name for p in CHARTS.glob("*.svg")}  # no chart shown that is not drawn


@pytest.mark.slow
def test_the_checked_in_charts_are_what_the_spec_draws_today(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = _docs.charts()  # checks every known-bad variant once (about 20 s)
    monkeypatch.setattr(_docs, "charts", lambda: drawn)
    assert _docs.stale(CHARTS) == (), "stale charts: run `tent spec charts`"
    copy = tmp_path / "charts" / "known_bad"
    copy.mkdir(parents=True)
    for chart in CHARTS.glob("*.svg"):
        copy.joinpath(chart.name).write_text(chart.read_text("utf-8"), encoding="utf-8")
    victim = copy / "credit-bad-delta_grants.svg"
    victim.write_text(victim.read_text("utf-8").replace("push_update(0)", "push_update(1)"))
    (copy / "left-over.svg").write_text("<svg/>")
    result = CliRunner().invoke(main, ["spec", "charts", "--check", "--docs", str(tmp_path)])
    assert result.exit_code == 1
    assert "credit-bad-delta_grants.svg" in result.output and "left-over.svg" in result.output
    result = CliRunner().invoke(main, ["spec", "charts", "--docs", str(tmp_path)])
    assert result.exit_code == 0 and not (copy / "left-over.svg").exists()
    assert _docs.stale(copy) == ()
