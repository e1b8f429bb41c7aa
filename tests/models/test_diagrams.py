"""The state diagrams are generated from the spec's tables, complete, and checked in up to date."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from tent_models import diagrams
from tent_models.cli import main
from tent_models.rendering import GraphvizMissing, svg_problems
from tent_spec.admission import OWNER_TRANSITIONS
from tent_spec.negotiation import MODES, TRANSITIONS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "diagrams"


_EDGE = re.compile(r'^\s*"(?P<src>[^"]+)" -> "(?P<dst>[^"]+)"(?: \[label="(?P<label>[^"]*)"\])?;$')
_FINAL = re.compile(r'^\s*"(?P<state>[^"]+)" \[peripheries=2\];$')


def arrows(diagram_name: str) -> dict[tuple[str, str], list[str]]:
    """``(source, target) -> labels`` of every arrow in the generated DOT source; a final
    state ``X`` (double border) is reported as an arrow ``X -> [*]`` with no label."""
    (diagram,) = (d for d in diagrams.diagrams() if d.name == diagram_name)
    out: dict[tuple[str, str], list[str]] = {}
    for line in diagrams.dot(diagram).splitlines():
        final = _FINAL.match(line)
        if final is not None:
            out[final.group("state"), "[*]"] = []
            continue
        edge = _EDGE.match(line)
        if edge is None:
            continue
        source, target, label = edge.group("src", "dst", "label")
        assert (source, target) not in out, f"two arrows {source} -> {target}"
        labels: list[str] = []
        for line_of_label in label.split("\\n") if label else []:
            if line_of_label.startswith("(") and labels:  # a mode qualifier, folded
                labels[-1] += f" {line_of_label}"
            else:
                labels.append(line_of_label)
        out[source, target] = labels
    return out


def test_checked_in_pages_equal_the_generated_ones() -> None:
    assert diagrams.stale(DOCS) == (), "stale diagrams: run `tent spec diagram`"
    for name, text in diagrams.pages().items():
        assert (DOCS / name).read_text(encoding="utf-8") == text


def test_every_owner_transition_is_an_arrow_and_nothing_else_is() -> None:
    drawn = arrows("owner_lifecycle")
    for (state, event), nxt in OWNER_TRANSITIONS.items():
        assert event in drawn[state, nxt]
    labels = sorted(label for (src, _), text in drawn.items() if src != "[*]" for label in text)
    assert labels == sorted(event for _, event in OWNER_TRANSITIONS)


def test_every_negotiation_row_is_an_arrow_labelled_with_its_event_and_mode() -> None:
    drawn = arrows("negotiation")
    for (mode, state, event), nxt in TRANSITIONS.items():
        labels = drawn[state, nxt]
        mode_dependent = len({TRANSITIONS.get((m, state, event)) for m in MODES} - {None}) > 1
        if mode_dependent:
            assert any(
                label.startswith(f"{event} (") and mode in label.split("(")[1] for label in labels
            ), (mode, state, event, labels)
        else:
            assert event in labels, (mode, state, event, labels)
    # Nothing drawn that the table does not have.
    for (source, target), labels in drawn.items():
        if "[*]" in (source, target):
            continue
        for label in labels:
            event = label.split(" (")[0]
            assert any(TRANSITIONS.get((m, source, event)) == target for m in MODES), (
                source,
                target,
                label,
            )


def test_start_and_final_states_follow_the_tables() -> None:
    owner = arrows("owner_lifecycle")
    assert ("[*]", "QUEUED") in owner
    assert [src for src, dst in owner if dst == "[*]"] == ["TERMINAL"]
    negotiation = arrows("negotiation")
    assert ("[*]", "DISABLED") in negotiation
    # No row leads from LEGACY or FAILED to another state: they are the final states.
    finals = sorted(src for src, dst in negotiation if dst == "[*]")
    assert finals == ["FAILED", "LEGACY"]
    for (_, state, _), nxt in TRANSITIONS.items():
        if state in finals:
            assert nxt == state


def test_pages_are_myst_with_a_title_and_the_picture_and_the_index_lists_them() -> None:
    pages = diagrams.pages()
    for item in diagrams.diagrams():
        text = pages[f"{item.name}.md"]
        assert text.startswith(f"# {item.title}\n")
        assert f"```{{image}} {item.name}.svg\n:alt: {item.title}: " in text
        assert pages[f"{item.name}.dot"] == diagrams.dot(item) + "\n"
        assert item.source in text
        assert f"\n{item.name}\n" in pages["index.md"]


def test_each_checked_in_picture_shows_exactly_its_generated_dot_source() -> None:
    for item in diagrams.diagrams():
        svg = (DOCS / f"{item.name}.svg").read_text(encoding="utf-8")
        assert svg_problems(diagrams.dot(item) + "\n", svg) == [], item.name


def test_the_picture_check_sees_a_missing_arrow_and_another_source() -> None:
    source = (DOCS / "owner_lifecycle.dot").read_text(encoding="utf-8")
    svg = (DOCS / "owner_lifecycle.svg").read_text(encoding="utf-8")
    # Graphviz draws each arrow as one <g class="edge"> group: remove the "complete" arrow.
    groups = re.findall(r'<g id="edge\d+" class="edge">.*?</g>', svg, re.DOTALL)
    (complete,) = [g for g in groups if ">complete<" in g]
    assert svg_problems(source, svg.replace(complete, "")) == [
        "arrow DISPATCHING -> TERMINAL ['complete'] is not drawn"
    ]
    changed = source.replace('label="dispatch"', 'label="go"')
    assert svg_problems(changed, svg) == [
        "the SVG was rendered from another DOT source",
        "arrow QUEUED -> DISPATCHING ['go'] is not drawn",
        "arrow QUEUED -> DISPATCHING ['dispatch'] is drawn but not in the source",
    ]


def _with_rendered_pictures(directory: Path) -> None:
    """Copy the checked-in SVGs: they show the current sources, so nothing needs Graphviz."""
    directory.mkdir(parents=True, exist_ok=True)
    for svg in DOCS.glob("*.svg"):
        shutil.copyfile(svg, directory / svg.name)


def test_write_renders_only_with_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs"))
    with pytest.raises(GraphvizMissing, match="apt-get install graphviz"):
        diagrams.write(tmp_path)
    # The text files were written before the first rendering was tried; the check needs no dot.
    assert (tmp_path / "negotiation.md").is_file()
    _with_rendered_pictures(tmp_path)
    assert diagrams.stale(tmp_path) == ()


def test_stale_pages_are_found_and_write_fixes_them(tmp_path: Path) -> None:
    generated = {*diagrams.pages(), *(f"{d.name}.svg" for d in diagrams.diagrams())}
    assert diagrams.stale(tmp_path) == tuple(sorted(generated))
    _with_rendered_pictures(tmp_path)
    written = diagrams.write(tmp_path)
    assert written == tuple(sorted(diagrams.pages()))
    assert diagrams.stale(tmp_path) == ()
    assert diagrams.write(tmp_path) == ()  # nothing to do the second time

    (tmp_path / "negotiation.md").write_text("hand edited\n", encoding="utf-8")
    (tmp_path / "removed_table.md").write_text("# gone\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a page\n", encoding="utf-8")
    assert diagrams.stale(tmp_path) == ("negotiation.md", "removed_table.md")
    assert diagrams.write(tmp_path) == ("negotiation.md", "removed_table.md")
    assert not (tmp_path / "removed_table.md").exists()
    assert (tmp_path / "notes.txt").exists()  # only generated .md pages are managed
    assert diagrams.stale(tmp_path) == ()


@pytest.mark.parametrize("damage", ["edit", "delete"])
def test_spec_diagram_check_exits_nonzero_when_stale(tmp_path: Path, damage: str) -> None:
    runner = CliRunner()
    out = str(tmp_path)  # --docs: the pages go to its diagrams/ folder
    _with_rendered_pictures(tmp_path / "diagrams")
    assert runner.invoke(main, ["spec", "diagram", "--docs", out]).exit_code == 0
    fresh = runner.invoke(main, ["spec", "diagram", "--check", "--docs", out])
    assert fresh.exit_code == 0, fresh.output
    assert "up to date" in fresh.output

    page = tmp_path / "diagrams" / "owner_lifecycle.md"
    if damage == "edit":
        page.write_text(page.read_text(encoding="utf-8").replace("dispatch", "go"), "utf-8")
    else:
        page.unlink()
    before = {p.name: p.read_bytes() for p in (tmp_path / "diagrams").iterdir()}
    result = runner.invoke(main, ["spec", "diagram", "--check", "--docs", out])
    assert result.exit_code == 1
    assert "owner_lifecycle.md" in result.output
    assert "tent spec diagram" in result.output
    # --check writes nothing.
    assert {p.name: p.read_bytes() for p in (tmp_path / "diagrams").iterdir()} == before

    assert runner.invoke(main, ["spec", "diagram", "--docs", out]).exit_code == 0
    assert runner.invoke(main, ["spec", "diagram", "--check", "--docs", out]).exit_code == 0


def test_spec_diagram_check_resolves_the_project_root_from_any_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # From a package folder of the checkout, the checked-in pages are found (not "all stale").
    monkeypatch.chdir(DOCS.parents[1] / "tent_credit")
    result = CliRunner().invoke(main, ["spec", "diagram", "--check"])
    assert result.exit_code == 0, result.output
    assert f"{DOCS}: {len(diagrams.pages())} page(s) up to date" in result.output.replace("\n", "")
    assert diagrams.project_root() == DOCS.parents[1]
