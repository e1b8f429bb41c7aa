"""The mutation benchmark (``benchmarks/mutants.py``), split by responsibility.

- :mod:`.model`: what a mutant is (hand-written :class:`Edit` lists, or a cosmic-ray
  :class:`ToolMutant`) and how one is applied to a copy of the sources, never to the checkout;
- :mod:`.catalogue_credit`, :mod:`.catalogue_sched`: the hand-written semantic mutants, each
  breaking one named rule, grouped by the defect class it stands for;
- :mod:`.tool`: the seeded sample of cosmic-ray mutants over ``tent_credit`` and ``tent_sched``;
- :mod:`.coverage_map`: one run of the suite under per-test coverage contexts, so each mutant
  runs only the tests that execute its lines;
- :mod:`.runner`: the copies, the per-mutant runs (conformance tests first, then the rest) and
  the JSON report.
"""
