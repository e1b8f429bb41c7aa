"""``tent check``: selection, the table, the reports, counterexamples and the exit code.

Only small targets run here (the negotiation models, small known-bad variants, toy models
registered through the ``toy_catalogue`` fixture); the full ``ci`` run is CI's own stage.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.console import Console
from tent_models import cli, registry
from tent_models.checker import check
from tent_models.cli import main
from tent_models.manifest import Counts, Manifest, save
from tent_models.registry import (
    Outcome,
    ProofVerdict,
    RunOptions,
    Target,
    TargetKind,
    Tier,
    judge_model,
    known_bad_target,
    model_target,
    proof_target,
    run_target,
    select,
)
from toy_models import Counter, Mutex

# Counter(3): 4 states (0..3), inc x3 + reset, depth 3.
TOY_COUNTS = Counts(distinct_states=4, transitions=4, depth=3)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _raise() -> ProofVerdict:
    raise RuntimeError("the proof module is broken")


@pytest.fixture
def toy_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.json"
    save(Manifest(models={"toy/ci": TOY_COUNTS, "toy/tiny": TOY_COUNTS}), path)
    return path


@pytest.fixture
def toy_catalogue(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Target, ...]]:
    """The test-only hook: the CLI reads the catalogue through ``registry.catalogue``."""
    targets = (
        model_target("toy/ci", Tier.CI, lambda: Counter(3)),
        model_target("toy/tiny", Tier.TINY, lambda: Counter(3)),
        model_target("toy/broken/ci", Tier.CI, lambda: Counter(3, bad=2)),
        model_target("toy/deep", Tier.DEEP, lambda: Counter(3)),
        model_target("toy/broken/deep", Tier.DEEP, lambda: Counter(6, bad=5)),
        known_bad_target("toy/bad/mutex", lambda: Mutex(3, buggy=True), "MutualExclusion"),
        known_bad_target("toy/bad/correct_mutex", lambda: Mutex(3), "MutualExclusion"),
        known_bad_target("toy/bad/wrong_invariant", lambda: Counter(3, bad=1), "Other"),
        proof_target("toy/proof/holds", lambda: ProofVerdict(holds=True)),
        proof_target(
            "toy/proof/fails", lambda: ProofVerdict(holds=False, counterexample="0 x=1\nbad")
        ),
        proof_target(
            "toy/proof/bad",
            lambda: ProofVerdict(holds=False, counterexample="cti"),
            expect_holds=False,
        ),
        proof_target(
            "toy/proof/bad_timeout", lambda: ProofVerdict(holds=False), expect_holds=False
        ),
        proof_target("toy/proof/raises", _raise),
    )
    monkeypatch.setattr(registry, "catalogue", lambda: targets)
    yield targets


# --- real targets ---------------------------------------------------------------------------------


def test_check_of_the_tiny_models_passes_with_a_table() -> None:
    tiny = [t.name for t in registry.catalogue() if t.tier is Tier.TINY]
    assert {"admission/tiny", "credit/tiny", "negotiation/tiny"} <= set(tiny)
    result = invoke("check", "--only", "*tiny*", "--no-progress")
    assert result.exit_code == 0, result.output
    for heading in ("target", "kind", "states", "transitions", "depth", "seconds", "states/s"):
        assert heading in result.output
    for name in tiny:
        row = next(line for line in result.output.splitlines() if f" {name} " in line)
        assert "model" in row
        assert row.rstrip("│ ").endswith("ok")
    assert "/ci " not in result.output  # only the selected targets ran
    assert f"{len(tiny)} target(s): {len(tiny)} passed, 0 failed" in result.output


def test_known_bad_variant_is_reported_refuted_and_its_trace_shown_only_on_request() -> None:
    name = "credit/bad/partial_reserve"
    quiet = invoke("check", "--only", name)
    assert quiet.exit_code == 0, quiet.output
    row = next(line for line in quiet.output.splitlines() if name in line and "│" in line)
    assert "known-bad" in row
    assert "refuted" in row
    assert "violated: dispatch_holds_full_charge" not in quiet.output

    shown = invoke("check", "--only", name, "--show-refutations")
    assert shown.exit_code == 0, shown.output
    assert "invariant violated: dispatch_holds_full_charge" in shown.output
    assert "\n1 action " in shown.output  # numbered steps
    assert "violated: dispatch_holds_full_charge" in shown.output


def test_json_and_junit_reports_parse_and_list_every_target(tmp_path: Path) -> None:
    json_path, junit_path = tmp_path / "report.json", tmp_path / "report.xml"
    names = ["negotiation/tiny", "credit/bad/delta_grants", "z3/credit/ledger"]
    args = ["check", "--json", str(json_path), "--junit", str(junit_path)]
    for name in names:
        args += ["--only", name]
    result = invoke(*args)
    assert result.exit_code == 0, result.output

    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["ok"] is True
    assert (report["passed"], report["failed"]) == (3, 0)
    by_name = {t["name"]: t for t in report["targets"]}
    assert set(by_name) == set(names)
    assert by_name["negotiation/tiny"]["result"] == "ok"
    assert by_name["negotiation/tiny"]["states"] > 0
    bad = by_name["credit/bad/delta_grants"]
    assert (bad["kind"], bad["result"], bad["passed"]) == ("known-bad", "refuted", True)
    assert "sender_grant_within_receiver_grant" in bad["counterexample"]
    violation = next(
        v for v in bad["violations"] if v["name"] == "sender_grant_within_receiver_grant"
    )
    assert violation["actions"] and all(isinstance(a[0], str) for a in violation["actions"])
    assert by_name["z3/credit/ledger"]["states"] is None
    assert by_name["z3/credit/ledger"]["result"] == "proved"

    suite = ET.parse(junit_path).getroot()
    assert suite.tag == "testsuites"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")
    cases = suite.findall("./testsuite/testcase")
    assert {c.get("name") for c in cases} == set(names)
    assert all(c.find("failure") is None for c in cases)


def test_json_to_stdout_is_the_only_thing_on_stdout() -> None:
    result = CliRunner().invoke(main, ["check", "--only", "negotiation/tiny", "--json", "-"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [t["name"] for t in report["targets"]] == ["negotiation/tiny"]
    assert "negotiation/tiny" in result.stderr  # the table went to stderr


def test_workers_give_the_same_counts() -> None:
    one = invoke("check", "--only", "negotiation/ci", "--json", "-")
    two = invoke("check", "--only", "negotiation/ci", "--json", "-", "--workers", "2")
    assert one.exit_code == two.exit_code == 0
    first, second = (json.loads(r.stdout)["targets"][0] for r in (one, two))
    assert [first[k] for k in ("states", "transitions", "depth")] == [
        second[k] for k in ("states", "transitions", "depth")
    ]


def test_plain_gives_the_same_counts_and_verdicts_through_the_readable_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tent_spec.credit import CreditSpec

    def forbidden(*_args: object) -> object:
        raise AssertionError("--plain must not use the fast path")

    selection = ("--only", "credit/tiny", "--only", "credit/bad/delta_grants", "--json", "-")
    fast = invoke("check", *selection)
    monkeypatch.setattr(CreditSpec, "fingerprinted_successors", forbidden)
    monkeypatch.setattr(CreditSpec, "fingerprint", forbidden)
    monkeypatch.setattr(CreditSpec, "invariants_hold", forbidden)
    plain = invoke("check", *selection, "--plain")
    assert fast.exit_code == plain.exit_code == 0, plain.output
    fields = ("name", "states", "transitions", "depth", "result", "counterexample")
    assert [{k: t[k] for k in fields} for t in json.loads(fast.stdout)["targets"]] == [
        {k: t[k] for k in fields} for t in json.loads(plain.stdout)["targets"]
    ]


def test_list_shows_the_selected_targets_without_running_them() -> None:
    result = invoke("check", "--list")
    assert result.exit_code == 0, result.output
    for name in ("negotiation/ci", "credit/bad/delta_grants", "z3/credit/allocator"):
        assert name in result.output
    assert "negotiation/tiny" not in result.output
    assert "negotiation/deep" not in result.output
    deep = invoke("check", "--list", "--deep")
    assert "negotiation/deep" in deep.output
    assert "seconds" not in result.output  # nothing ran


def test_an_unmatched_selection_is_a_usage_error() -> None:
    result = invoke("check", "--only", "no/such/target")
    assert result.exit_code == 2
    assert "no target matches" in result.output


def test_simulate_walks_a_deep_model_from_a_seed() -> None:
    args = ["check", "--simulate", "--only", "negotiation/deep", "--walks", "5", "--depth", "20"]
    first = invoke(*args, "--json", "-")
    again = invoke(*args, "--json", "-")
    assert first.exit_code == 0, first.output
    (target,) = json.loads(first.stdout)["targets"]
    assert (target["name"], target["result"]) == ("negotiation/deep", "ok")
    assert json.loads(first.stdout)["mode"] == "simulation"
    counts = ("states", "transitions", "depth")
    assert [target[k] for k in counts] == [
        json.loads(again.stdout)["targets"][0][k] for k in counts
    ]


# --- toy targets through the registry hook --------------------------------------------------------


@pytest.mark.usefixtures("toy_catalogue")
def test_a_violating_model_fails_the_run_and_prints_its_counterexample(
    toy_manifest: Path,
) -> None:
    result = invoke("check", "--manifest", str(toy_manifest), "--only", "toy/*ci")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert any("toy/broken/ci" in line and "violated" in line for line in lines)
    assert any(" toy/ci " in line and line.rstrip("│ ").endswith("ok") for line in lines)
    assert "invariant violated: NotBad" in result.output
    trace = result.output[result.output.index("invariant violated: NotBad") :]
    for step in ("0 initial state", "1 action inc()", "value: 0 -> 1", "2 action inc()"):
        assert step in trace
    assert "violated: NotBad\n    cites: the value never reaches 2" in trace
    assert "2 target(s): 1 passed, 1 failed" in result.output


@pytest.mark.usefixtures("toy_catalogue")
def test_known_bad_outcomes_refuted_not_refuted_and_wrong_invariant(
    tmp_path: Path, toy_manifest: Path
) -> None:
    junit = tmp_path / "junit.xml"
    result = invoke(
        "check", "--manifest", str(toy_manifest), "--only", "toy/bad/*", "--junit", str(junit)
    )
    assert result.exit_code == 1
    verdicts = {
        "toy/bad/mutex": "refuted",
        "toy/bad/correct_mutex": "not refuted",
        "toy/bad/wrong_invariant": "wrong violation",
    }
    for name, verdict in verdicts.items():
        row = next(line for line in result.output.splitlines() if f" {name} " in line)
        assert row.rstrip("│ ").endswith(verdict), row
    assert "expected a violation of Other, found invariant NotBad" in result.output
    assert "expected a violation of MutualExclusion, the check found none" in result.output
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["toy/bad/mutex"].find("failure") is None
    failure = cases["toy/bad/wrong_invariant"].find("failure")
    assert failure is not None
    assert failure.get("type") == "wrong violation"
    assert "invariant violated: NotBad" in (failure.text or "")


@pytest.mark.usefixtures("toy_catalogue")
def test_proofs_pass_when_they_hold_and_known_bad_proofs_when_refuted(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = invoke("check", "--only", "toy/proof/*", "--json", str(report_path))
    assert result.exit_code == 1
    targets = {t["name"]: t for t in json.loads(report_path.read_text())["targets"]}
    assert {name: (t["result"], t["passed"]) for name, t in targets.items()} == {
        "toy/proof/holds": ("proved", True),
        "toy/proof/fails": ("not proved", False),
        "toy/proof/bad": ("refuted", True),
        "toy/proof/bad_timeout": ("not refuted", False),
        "toy/proof/raises": ("error", False),
    }
    assert "RuntimeError: the proof module is broken" in targets["toy/proof/raises"]["message"]
    assert "0 x=1\nbad" in result.output  # the failing proof's counterexample is printed


@pytest.mark.usefixtures("toy_catalogue")
def test_an_erroring_target_is_an_error_testcase_and_the_others_still_run(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "junit.xml"
    result = invoke(
        "check", "--only", "toy/proof/raises", "--only", "toy/proof/holds", "--junit", str(junit)
    )
    assert result.exit_code == 1
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "1")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    error = cases["toy/proof/raises"].find("error")
    assert error is not None
    assert "Traceback" in (error.text or "")
    assert cases["toy/proof/holds"].find("system-out") is not None


@pytest.mark.usefixtures("toy_catalogue")
def test_simulation_of_a_broken_deep_model_fails_with_a_minimised_trace() -> None:
    result = invoke("check", "--simulate", "--only", "toy/*deep", "--walks", "20", "--seed", "7")
    assert result.exit_code == 1
    assert any(" toy/deep " in line and "ok" in line for line in result.output.splitlines())
    assert "invariant violated: NotBad" in result.output
    assert "5 action inc()" in result.output
    assert "6 action" not in result.output  # minimised: the shortest walk to 5


def test_selection_tiers() -> None:
    targets = (
        model_target("m/tiny", Tier.TINY, lambda: Counter(1)),
        model_target("m/ci", Tier.CI, lambda: Counter(1)),
        model_target("m/deep", Tier.DEEP, lambda: Counter(1)),
        proof_target("p", lambda: ProofVerdict(holds=True)),
    )
    assert [t.name for t in select(targets)] == ["m/ci", "p"]
    assert [t.name for t in select(targets, deep=True)] == ["m/ci", "m/deep", "p"]
    assert [t.name for t in select(targets, only=["m/*"])] == ["m/tiny", "m/ci"]
    assert [t.name for t in select(targets, only=["m/*"], deep=True)] == [
        "m/tiny",
        "m/ci",
        "m/deep",
    ]
    assert [t.name for t in select(targets, only=["p", "m/tiny"])] == ["m/tiny", "p"]


def test_catalogue_has_every_shipped_configuration_and_variant() -> None:
    from tent_models import configs
    from tent_models.configs import admission as configs_admission

    catalogue = registry.catalogue()
    by_name = {t.name: t for t in catalogue}
    assert len(by_name) == len(catalogue)
    for name in [*configs.CONFIGS, *configs_admission.CONFIGS]:
        assert by_name[name].kind is TargetKind.MODEL
        assert by_name[name].tier.value == name.rsplit("/", 1)[1]
    for variant in configs.KNOWN_BAD_CONFIGS:
        assert by_name[f"credit/bad/{variant}"].kind is TargetKind.KNOWN_BAD
    for name in configs_admission.KNOWN_BAD:
        assert by_name[name].kind is TargetKind.KNOWN_BAD
    kinds = [t.kind for t in catalogue]
    assert kinds == sorted(kinds, key=registry.TARGET_KINDS.index)
    assert {t.kind for t in catalogue} == set(registry.TARGET_KINDS)


def test_a_model_that_was_not_explored_exhaustively_fails() -> None:
    result = check(Counter(10), max_states=3)
    outcome = judge_model("toy/ci", Tier.CI, result, Manifest())
    assert (outcome.passed, outcome.verdict) == (False, "not exhaustive")


def test_progress_display_reports_each_finished_target() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    targets = [
        proof_target("a/holds", lambda: ProofVerdict(holds=True)),
        proof_target("b/fails", lambda: ProofVerdict(holds=False)),
    ]
    outcomes = cli._run_all(
        targets, lambda t, hook: run_target(t, RunOptions()), console=console, progress=True
    )
    assert [o.passed for o in outcomes] == [True, False]
    text = buffer.getvalue()
    assert "a/holds: proved" in text
    assert "b/fails: not proved" in text


def test_one_progress_display_counts_targets_and_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's one display hears the checker through a hook: no second display of its own."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    heard: list[int] = []
    targets = [model_target("toy/count/ci", Tier.CI, lambda: Counter(50))]

    def runner(target: Target, hook: object) -> Outcome:
        assert callable(hook)

        def spy(distinct: int, transitions: int, depth: int) -> None:
            heard.append(distinct)
            hook(distinct, transitions, depth)

        return run_target(target, RunOptions(progress=spy, manifest=Manifest(models={})))

    opened = []
    real = cli.Progress.__init__

    def counting_init(self: object, *args: object, **kwargs: object) -> None:
        opened.append(self)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cli.Progress, "__init__", counting_init)
    (outcome,) = cli._run_all(targets, runner, console=console, progress=True)
    assert heard and heard[-1] == outcome.states  # the checker reported its work
    assert len(opened) == 1  # the checker opened no display of its own
    assert "toy/count/ci" in buffer.getvalue()


def test_outcome_refutation_flag() -> None:
    refuted = Outcome(
        target="x",
        kind=TargetKind.KNOWN_BAD,
        tier=Tier.CI,
        passed=True,
        verdict="refuted",
        seconds=0.0,
    )
    assert refuted.refutation
    assert not Outcome(
        target="x", kind=TargetKind.MODEL, tier=Tier.CI, passed=True, verdict="ok", seconds=0.0
    ).refutation


def test_every_mlu_proof_is_a_target_in_prove_all_order() -> None:
    from tent_models.proofs import mlu_z3

    registered = [t.name for t in registry.catalogue() if t.name.startswith("z3/mlu/")]
    assert registered == sorted(f"z3/{result.name}" for result in mlu_z3.prove_all())


def test_simulating_a_target_without_a_model_is_an_error_outcome() -> None:
    target = proof_target("p", lambda: ProofVerdict(holds=True))
    outcome = registry.simulate_target(target, seed=0, walks=1, depth=1)
    assert (outcome.passed, outcome.verdict) == (False, "error")
    assert "has no model to simulate" in outcome.message


def test_every_arbitration_property_and_broken_variant_is_a_target() -> None:
    from tent_models.proofs import arbitration_z3

    by_name = {t.name: t for t in registry.catalogue() if t.name.startswith("z3/arbitration/")}
    expected = {"z3/arbitration/lemma_score_range"}
    expected |= {f"z3/arbitration/{name}" for name in arbitration_z3.PROPERTIES}
    expected |= {f"z3/arbitration/bad/{name}" for name in arbitration_z3.BROKEN_VARIANTS}
    assert set(by_name) == expected


def test_a_broken_arbitration_greedy_is_refuted_with_its_counterexample() -> None:
    result = invoke("check", "--only", "z3/arbitration/bad/ge_wins", "--show-refutations")
    assert result.exit_code == 0, result.output
    assert "refuted" in result.output
    assert "arbitration/ties_keep_arrival_order[ge_wins]: counterexample to n=" in result.output


def test_junit_to_stdout_is_the_only_thing_on_stdout_and_both_cannot_share_it() -> None:
    result = invoke("check", "--only", "negotiation/tiny", "--junit", "-")
    assert result.exit_code == 0, result.stderr
    cases = ET.fromstring(result.stdout).findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["negotiation/tiny"]
    both = invoke("check", "--only", "negotiation/tiny", "--junit", "-", "--json", "-")
    assert both.exit_code == 2
    assert "only one of --json and --junit" in both.output
