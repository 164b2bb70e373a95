"""The partner's portal as `[portal]` describes it: where its export page is, which form fields the post
sets, what each region is called there and what every record of an answer must carry. One value, built
and checked once from the configuration, so a template that cannot work is refused before any request.

A template is text with `{day}` (YYYY-MM-DD), `{day:PATTERN}` (YYYY, MM and DD written into PATTERN,
every other character as it stands) and `{region}` (the region's value); `{{` and `}}` are braces.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

from ..breaker import KeyBreaker

DEFAULT_PAGE = "/export?day={day}&region={region}"
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_DATE_PART = re.compile(r"YYYY|MM|DD|[YMD]+")
Part = str | Callable[[datetime.date, str], str]  # literal text, or what a placeholder writes


class ShapeError(ValueError):
    """A `[portal]` setting that cannot work, said in one line naming the key."""


@dataclass(frozen=True)
class Login:
    """The portal login; the password never shows in a repr, a log line or an error."""

    username: str
    password: str
    path: str = "/login"
    breaker: KeyBreaker | None = None  # a refused login trips it: nothing hammers the login after

    def __repr__(self) -> str:
        return f"Login(username={self.username!r}, path={self.path!r})"


def _date_writer(pattern: str, where: str) -> Callable[[datetime.date, str], str]:
    if not pattern:
        raise ShapeError(f"{where}: {{day:}} has no pattern: write it as {{day:DD.MM.YYYY}}, say")
    if "%" in pattern:
        raise ShapeError(f"{where}: {{day:{pattern}}} holds %: write the date with YYYY, MM and DD, not strftime's %")
    if not re.search("YYYY|MM|DD", pattern):
        raise ShapeError(f"{where}: {{day:{pattern}}} holds no YYYY, MM or DD (upper case) to write the date with")
    formats = []
    for piece in re.split(f"({_DATE_PART.pattern})", pattern):
        if piece in ("YYYY", "MM", "DD"):
            formats.append({"YYYY": "{0.year:04d}", "MM": "{0.month:02d}", "DD": "{0.day:02d}"}[piece])
        elif _DATE_PART.fullmatch(piece):
            raise ShapeError(f"{where}: {{day:{pattern}}} holds {piece!r}: the date's parts are YYYY, MM and DD")
        else:
            formats.append(piece.replace("{", "{{").replace("}", "}}"))
    fmt = "".join(formats)
    return lambda day, region: fmt.format(day)


def _placeholder(inner: str, where: str) -> Callable[[datetime.date, str], str]:
    name, colon, pattern = inner.partition(":")
    name = name.strip()
    if name == "day" and colon:
        return _date_writer(pattern, where)
    if name == "day":
        return lambda day, region: day.isoformat()
    if name == "region" and not colon:
        return lambda day, region: region
    raise ShapeError(f"{where}: unknown placeholder {{{inner}}}: use {{day}}, {{day:DD.MM.YYYY}} or {{region}}")


@dataclass(frozen=True)
class Template:
    """A template parsed once; `render` writes it for a day and a region's value."""

    text: str
    parts: tuple[Part, ...] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, text: str, where: str) -> Template:
        parts: list[Part] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(text):
            parts.append(text[pos : m.start()])
            token, pos = m.group(0), m.end()
            if token in ("{{", "}}"):
                parts.append(token[0])
            elif m.group(1) is None:
                raise ShapeError(f"{where}: a lone {token!r} at character {m.start() + 1}: write {token * 2} for one")
            else:
                parts.append(_placeholder(m.group(1).strip(), where))
        parts.append(text[pos:])
        return cls(text, tuple(p for p in parts if p != ""))

    def render(self, day: datetime.date, region: str, escape: Callable[[str], str] | None = None) -> str:
        """The text for `day` and the region's value; `escape` applies to each substitution."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                value = part(day, region)
                out.append(escape(value) if escape else value)
        return "".join(out)


def _url_escape(value: str) -> str:
    return quote(value, safe="")


def split_entries(text: str) -> list[str]:
    """Comma-separated entries, commas inside a placeholder's braces left alone; empty ones dropped."""
    entries, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char == "{"
        depth -= char == "}" and depth > 0
        if char == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:])
    return [e.strip() for e in entries if e.strip()]


def pairs(key: str, text: str) -> list[tuple[str, str]]:
    """`NAME=VALUE, ...` of `[portal] key`: each name once, none empty."""
    found: list[tuple[str, str]] = []
    for entry in split_entries(text):
        name, eq, value = entry.partition("=")
        name = name.strip()
        if not eq or not name:
            raise ShapeError(f"[portal] {key}: {entry!r} is no NAME=VALUE entry (entries are comma-separated)")
        if name in (n for n, _ in found):
            raise ShapeError(f"[portal] {key}: {name!r} is given twice")
        found.append((name, value.strip()))
    return found


def templates(key: str, text: str) -> tuple[tuple[str, Template], ...]:
    return tuple((name, Template.parse(value, f"[portal] {key} {name}")) for name, value in pairs(key, text))


@dataclass(frozen=True)
class PortalShape:
    """Everything the export needs to know about the partner's portal; the defaults are the simplest portal."""

    base_url: str
    login: Login | None = None
    export_page: Template = field(default_factory=lambda: Template.parse(DEFAULT_PAGE, "[portal] export_page"))
    fields: tuple[tuple[str, Template], ...] = ()  # form fields the post sets, whatever the page gave them
    region_values: tuple[tuple[str, str], ...] = ()  # region -> what {region} stands for
    checks: tuple[tuple[str, Template], ...] = ()  # record field -> the value every record must carry

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @classmethod
    def from_settings(
        cls,
        base_url: str,
        regions: Iterable[str],
        *,
        login: Login | None = None,
        export_page: str = DEFAULT_PAGE,
        export_fields: str = "",
        region_values: str = "",
        record_checks: str = "",
    ) -> PortalShape:
        """The shape `[portal]`'s keys describe; ShapeError naming the key for one that cannot work."""
        known = list(regions)
        values = pairs("region_values", region_values)
        for region, value in values:
            if region not in known:
                raise ShapeError(
                    f"[portal] region_values: {region!r} is not one of [portal] regions ({', '.join(known)})"
                )
            if not value:
                raise ShapeError(f"[portal] region_values: {region!r} has no value: give REGION=VALUE")
        return cls(
            base_url,
            login,
            Template.parse(export_page.strip(), "[portal] export_page"),
            templates("export_fields", export_fields),
            tuple(values),
            templates("record_checks", record_checks),
        )

    def value_of(self, region: str) -> str:
        """What `{region}` stands for: its `region_values` entry, else its name."""
        return next((v for r, v in self.region_values if r == region), region)

    def page_url(self, day: datetime.date, region: str) -> str:
        """The export page's URL, every substitution URL-encoded."""
        return self.base_url + self.export_page.render(day, self.value_of(region), _url_escape)

    def field_values(self, day: datetime.date, region: str) -> list[tuple[str, str]]:
        return [(name, t.render(day, self.value_of(region))) for name, t in self.fields]

    def wanted(self, day: datetime.date, region: str) -> list[tuple[str, str]]:
        """(record field, value) every record of the region's answer must carry."""
        return [(name, t.render(day, self.value_of(region))) for name, t in self.checks]


def shape_of(portal: PortalShape | str) -> PortalShape:
    """A base URL alone is the simplest portal there."""
    return portal if isinstance(portal, PortalShape) else PortalShape(portal)
