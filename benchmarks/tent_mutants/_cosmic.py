"""The two calls into cosmic-ray (the ``mutation`` extra): its operators, and one mutation.

Its own module so that the mutant model (which applies a mutation) and the enumeration in
:mod:`tool` (which builds the model's mutants) both use it without importing each other.
"""

from __future__ import annotations


def operators() -> list[tuple[str, object]]:
    """cosmic-ray's operators that need no argument, by name, each instantiated once."""
    from cosmic_ray import plugins

    out: list[tuple[str, object]] = []
    for name in sorted(plugins.operator_names()):
        cls = plugins.get_operator(name)
        if cls.arguments():  # VariableReplacer / VariableInserter need a cause and an effect
            continue
        out.append((name, cls()))
    return out


def mutate(code: str, operator: str, occurrence: int) -> str | None:
    """``code`` with cosmic-ray's ``operator`` applied at ``occurrence`` (None if none such)."""
    from cosmic_ray import plugins
    from cosmic_ray.mutating import mutate_code

    result: str | None = mutate_code(code, plugins.get_operator(operator)(), occurrence)
    return result
