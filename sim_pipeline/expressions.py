"""CEL expressions over the world: what `expression` policy rules test and `computes:` actions work out.

Evaluated by the Rust cel-interpreter (the common-expression-language package): no `eval`, no home-made parser, no
side effects. An expression reads named roots (a rule: record, linked, args, now, tables; a computed value also
records, every table of the world) and may call `date(text)` (an ISO date or date-time as a timestamp) and
`sum(list)`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import lru_cache
from types import ModuleType
from typing import Any


def _cel_extension() -> ModuleType:
    """The package's Rust extension `cel.cel` (compile, Context, evaluate), loaded without the package's __init__,
    which also imports its REPL (typer, prompt_toolkit, rich, pygments: ~400 modules, ~10 MB of a run's peak RSS
    and ~0.3 s) that evaluating never uses. A later `import cel` finds this same module in sys.modules."""
    if "cel.cel" in sys.modules:
        return sys.modules["cel.cel"]
    package = importlib.util.find_spec("cel")  # locates the package without running it
    spec = importlib.machinery.PathFinder.find_spec("cel.cel", package.submodule_search_locations if package else None)
    if spec is None or spec.loader is None:  # laid out otherwise: the package as it imports itself
        import cel

        return cel
    module = importlib.util.module_from_spec(spec)
    sys.modules["cel.cel"] = module
    spec.loader.exec_module(module)
    return module


cel = _cel_extension()

FAILURES = (KeyError, TypeError, ValueError, RuntimeError, OverflowError)  # what an evaluation on the wrong data raises


def date(text: Any) -> datetime:
    """An ISO date ('2026-10-31', midnight UTC) or date-time ('2026-10-31T20:00:00Z') as a timestamp."""
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


@lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    return cel.compile(expression)


_BOUND = re.compile(r"\.(?:map|all|exists|exists_one|filter)\(\s*([A-Za-z_]\w*)\s*,")  # a macro's item variable


def reads(expression: str) -> set[str]:
    """The roots an expression reads (not the item variables its macros bind: `f` in `flights.map(f, f.price)`);
    ValueError when it is not CEL."""
    return set(_program(expression).variables()) - set(_BOUND.findall(expression))


def evaluate(expression: str, roots: Mapping[str, Any]) -> Any:
    """The expression's value over these roots (`now`, when given as text, becomes a timestamp); raises one of
    FAILURES when the data does not fit it."""
    context = cel.Context()
    context.add_function("sum", lambda items: sum(items))
    context.add_function("date", date)
    values = {k: (date(v) if k == "now" and isinstance(v, str) else v) for k, v in roots.items()}
    context.update(values)
    return cel.evaluate(expression, context)
