"""What an HTML page offers: its reCAPTCHA widget, the form around it, its frames, its title. Pure
functions over HTML text (html.parser: lenient like a browser, names lower-cased, entities in attribute
values unescaped), so every variant a portal may serve is tested on saved HTML without a network."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

# Browsers send none of these on a scripted form.submit(), which is how the widget's callback posts.
_NOT_SENT = frozenset({"submit", "button", "reset", "image", "file"})
_ANCHOR = re.compile(r"/recaptcha/(?:api2|enterprise)/anchor\b")
_RENDER = re.compile(r"grecaptcha(?:\.enterprise)?\.render\s*\(\s*(?P<target>[^,]*?)\s*,\s*\{(?P<opts>[^}]*)\}", re.S)


def _option(opts: str, name: str) -> str | None:
    """One string option of a grecaptcha.render({...}) literal: sitekey: '...', 'size': "..."."""
    m = re.search(rf"""["']?{re.escape(name)}["']?\s*:\s*(["'])(.*?)\1""", opts, re.S)
    return m.group(2) if m else None


@dataclass(frozen=True)
class Widget:
    sitekey: str
    invisible: bool = False
    enterprise: bool = False
    data_s: str | None = None

    @property
    def kind(self) -> str:
        return ("enterprise " if self.enterprise else "") + ("invisible" if self.invisible else "checkbox")

    def solve_params(self) -> dict[str, str]:
        """CaptchaAI's own parameters for method=userrecaptcha: a token solved for another kind is refused."""
        params = {"googlekey": self.sitekey}
        if self.invisible:
            params["invisible"] = "1"
        if self.enterprise:
            params["enterprise"] = "1"
        if self.data_s is not None:
            params["data-s"] = self.data_s
        return params


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    kind: str = "text"  # the input's type, or "select" / "textarea"

    @property
    def hidden(self) -> bool:
        return self.kind == "hidden"


@dataclass(frozen=True)
class Select:
    """A `<select>` of a form: what it may be set to, (value, label) per option in page order."""

    name: str
    options: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Form:
    action: str  # absolute
    method: str  # "GET" or "POST"
    fields: tuple[Field, ...]
    has_password: bool = False
    selects: tuple[Select, ...] = ()


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    widget: Widget | None
    form: Form | None  # the form around the widget
    forms: tuple[Form, ...]  # every form, in page order
    frames: tuple[str, ...]  # absolute URLs of the page's frames, reCAPTCHA's own left out

    @property
    def login_form(self) -> Form | None:
        return next((f for f in self.forms if f.has_password), None)


@dataclass
class _OpenForm:
    attrs: dict[str, str]
    fields: list[Field] = field(default_factory=list)
    password: bool = False
    selects: list[Select] = field(default_factory=list)

    def form(self, base: str) -> Form:
        action = self.attrs.get("action", "").strip()
        method = self.attrs.get("method", "get").strip().upper()
        target = urljoin(base, action) if action else base.split("#")[0]
        return Form(
            target, "POST" if method == "POST" else "GET", tuple(self.fields), self.password, tuple(self.selects)
        )


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[_OpenForm] = []
        self.current: _OpenForm | None = None  # a browser's "form element pointer"
        self.by_id: dict[str, _OpenForm | None] = {}  # element id -> its form
        self.widget: dict[str, str] | None = None
        self.widget_form: _OpenForm | None = None
        self.frames: list[str] = []
        self.scripts: list[str] = []
        self.enterprise = False
        self.base: str | None = None
        self.title = ""
        self._in: str | None = None  # "title", "script", "textarea", "option"
        self._text: list[str] = []
        self._textarea: tuple[_OpenForm | None, str] | None = None
        self._select: tuple[_OpenForm | None, str, bool] | None = None  # (form, name, multiple)
        self._options: list[tuple[str, bool, str]] = []  # (value, selected, label)
        self._option: tuple[str | None, bool] | None = None

    def _form_of(self, attrs: dict[str, str]) -> _OpenForm | None:
        owner = attrs.get("form")
        if owner:  # form="id" associates a field with a form elsewhere in the page
            return next((f for f in self.forms if f.attrs.get("id") == owner), None)
        return self.current

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        if tag == "form":
            if self.current is None:  # a form inside a form is ignored, as browsers do
                self.current = _OpenForm(attrs)
                self.forms.append(self.current)
        elif tag == "base" and self.base is None and attrs.get("href"):
            self.base = attrs["href"]
        elif tag == "input":
            self._input(attrs)
        elif tag == "textarea" and attrs.get("name") and "disabled" not in attrs:
            self._textarea, self._in, self._text = (self._form_of(attrs), attrs["name"]), "textarea", []
        elif tag == "select" and attrs.get("name") and "disabled" not in attrs:
            self._select, self._options = (self._form_of(attrs), attrs["name"], "multiple" in attrs), []
        elif tag == "option" and self._select is not None:
            self._close_option()
            self._option, self._in, self._text = (attrs.get("value"), "selected" in attrs), "option", []
        elif tag == "title" and not self.title:
            self._in, self._text = "title", []
        elif tag == "script":
            if "recaptcha/enterprise.js" in attrs.get("src", ""):
                self.enterprise = True
            self._in, self._text = "script", []
        elif tag in ("iframe", "frame") and attrs.get("src"):
            self._frame(attrs)
        if "id" in attrs:
            self.by_id.setdefault(attrs["id"], self.current)
        if "data-sitekey" in attrs and self.widget is None and attrs["data-sitekey"].strip():
            self.widget, self.widget_form = attrs, self.current

    def handle_startendtag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs_list)
        if tag in ("textarea", "select", "option", "title", "script"):
            self.handle_endtag(tag)

    def _input(self, attrs: dict[str, str]) -> None:
        kind = attrs.get("type", "").lower()
        form = self._form_of(attrs)
        if kind == "password" and form is not None:
            form.password = True
        name = attrs.get("name")
        if not name or kind in _NOT_SENT or "disabled" in attrs or form is None:
            return
        checkable = kind in ("checkbox", "radio")
        if not checkable or "checked" in attrs:
            form.fields.append(Field(name, attrs.get("value", "on" if checkable else ""), kind))

    def _frame(self, attrs: dict[str, str]) -> None:
        src = attrs["src"]
        if _ANCHOR.search(src):
            query = parse_qs(urlsplit(src).query)
            sitekey = (query.get("k") or [""])[0]
            if sitekey and self.widget is None:
                size = (query.get("size") or [""])[0]
                self.widget = {"data-sitekey": sitekey, "data-size": size}
                self.widget_form = self.current
                self.enterprise = self.enterprise or "/recaptcha/enterprise/" in src
            return
        if "recaptcha" not in src:
            self.frames.append(src)

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        text = "".join(self._text)
        if tag == "form":
            self.current = None  # even a nested form's end tag closes the open one, as browsers do
        elif tag == "textarea" and self._in == "textarea" and self._textarea is not None:
            form, name = self._textarea
            if form is not None:  # a browser drops one newline right after <textarea>
                form.fields.append(Field(name, text[1:] if text.startswith("\n") else text, "textarea"))
            self._textarea = None
        elif tag == "option" and self._option is not None:
            self._close_option()
        elif tag == "select" and self._select is not None:
            self._close_option()
            self._close_select()
        elif tag == "title" and self._in == "title":
            self.title = " ".join(text.split())
        elif tag == "script" and self._in == "script":
            self.scripts.append(text)
        if tag == self._in:
            self._in, self._text = None, []

    def _close_option(self) -> None:
        if self._option is not None:
            value, selected = self._option
            label = " ".join("".join(self._text).split())
            self._options.append((value if value is not None else label, selected, label))
            self._option = None

    def _close_select(self) -> None:
        assert self._select is not None
        form, name, multiple = self._select
        chosen = [v for v, selected, _ in self._options if selected]
        if not multiple:  # a single select sends its last selected option, or its first one
            chosen = chosen[-1:] or [v for v, _, _ in self._options[:1]]
        if form is not None:
            form.fields.extend(Field(name, v, "select") for v in chosen)
            form.selects.append(Select(name, tuple((v, label) for v, _, label in self._options)))
        self._select, self._in, self._text = None, None, []

    def render_widget(self) -> None:
        """The sitekey of a grecaptcha.render(target, {sitekey: ...}) call in an inline script."""
        for script in self.scripts:
            for call in _RENDER.finditer(script):
                sitekey = _option(call["opts"], "sitekey")
                if not sitekey:
                    continue
                self.widget = {"data-sitekey": sitekey, "data-size": _option(call["opts"], "size") or ""}
                self.widget_form = self.by_id.get(call["target"].strip("'\" "))
                self.enterprise = self.enterprise or "grecaptcha.enterprise." in call.group(0)
                return


def parse_page(html: str, url: str) -> Page:
    """Everything the export needs from one page, whose final URL (after redirects) is `url`."""
    parser = _Parser()
    parser.feed(html)
    parser.close()
    if parser.widget is None:
        parser.render_widget()
    base = urljoin(url, parser.base) if parser.base else url
    widget = None
    if (w := parser.widget) is not None:
        invisible = w.get("data-size", "").strip().lower() == "invisible"
        widget = Widget(w["data-sitekey"].strip(), invisible, parser.enterprise, w.get("data-s"))
    forms = {id(f): f.form(base) for f in parser.forms}
    form = forms[id(parser.widget_form)] if parser.widget_form is not None else None
    frames = tuple(urljoin(base, src) for src in parser.frames)
    return Page(url, parser.title, widget, form, tuple(forms.values()), frames)


def looks_like_html(text: str) -> bool:
    head = text.lstrip()[:512].lower()
    return head.startswith(("<!doctype html", "<html")) or "<head" in head or "<body" in head


def title_of(html: str) -> str:
    return parse_page(html, "http://localhost/").title
