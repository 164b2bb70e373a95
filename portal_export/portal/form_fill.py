"""The export form filled as `[portal] export_fields` says, the way Scrapy's `FormRequest.from_response`
does: the page's form as given (hidden fields, selected options), each named field set to its value
whatever the page gave it, added where the form lacks it. A `<select>` is set to one of its options
only (an option's label names its value, as in MechanicalSoup's `set_select`): otherwise the post
cannot work, which is said before a captcha is paid for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .page import Select

SHOWN_OPTIONS = 30  # a select of hundreds of markets: the first ones, and how many more


@dataclass(frozen=True)
class Filled:
    fields: list[tuple[str, str]]  # in the form's order, added ones after
    added: frozenset[str]  # named fields the form lacked
    problems: tuple[str, ...]  # why the post cannot work: a value no select offers


def offered(select: Select) -> str:
    shown = [repr(v) + (f" ({label})" if label and label != v else "") for v, label in select.options]
    more = len(shown) - SHOWN_OPTIONS
    return ", ".join(shown[:SHOWN_OPTIONS]) + (f" and {more} more" if more > 0 else "") if shown else "none"


def choose(select: Select, value: str) -> tuple[str, str | None]:
    """The option value to post for `value` (an option's value, else its label), and the problem if none."""
    if any(v == value for v, _ in select.options):
        return value, None
    by_label = next((v for v, label in select.options if label == " ".join(value.split())), None)
    if by_label is not None:
        return by_label, None
    problem = f"field {select.name!r} is a <select> without the value {value!r}; it offers {offered(select)}"
    return value, problem


def fill(fields: Sequence[tuple[str, str]], selects: Sequence[Select], values: Sequence[tuple[str, str]]) -> Filled:
    """`fields` (the form's, in order) with each of `values` set: in place of the first field of its
    name (others of that name dropped), or added at the end."""
    out = list(fields)
    added, problems = [], []
    select_of: dict[str, Select] = {}
    for select in selects:
        select_of.setdefault(select.name, select)
    for name, value in values:
        if name in select_of:
            value, problem = choose(select_of[name], value)
            problems += [problem] if problem else []
        at = [i for i, (n, _) in enumerate(out) if n == name]
        if not at:  # the form lacks it, or it is a select of no option (which sends nothing)
            out.append((name, value))
            added += [] if name in select_of else [name]
            continue
        out[at[0]] = (name, value)
        out = [f for i, f in enumerate(out) if i not in at[1:]]
    return Filled(out, frozenset(added), tuple(problems))
