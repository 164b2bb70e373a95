"""README.md and docs/*.md: every relative link resolves, and the README stays short.

A link is `[text](target)`, `![alt](target)`, `[text]: target` (a reference definition) or
`<img src="target">`. http(s) and mailto links are not followed (no network). A relative target
must name an existing file (relative to the page that links it), and a `#fragment` must be the
slug of a heading of the target page, by GitHub's rule: lowercase; every character that is not a
letter, digit, space, hyphen or underscore dropped; spaces to hyphens; a repeated slug gets -1, -2.
Links and headings inside code (fenced blocks, `inline code`) are not links or headings.
Standard library only."""

import functools
import re
import urllib.parse

from tests import ROOT  # noqa: E402

README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# [text](target) and ![alt](target); the text may hold one level of brackets ([`a[0]`](x))
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]*)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
IMG_SRC = re.compile(r"<img\b[^>]*?\bsrc\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
EXTERNAL = re.compile(r"^(?:https?:|mailto:)", re.I)


def pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text, blank_inline_code=True):
    """(line number, line) outside fenced code blocks; inline code spans blanked unless told not to
    (a heading's code text is part of its slug)."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        yield number, INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line) if blank_inline_code else line


def heading_texts(text):
    """The text of every heading (ATX and setext), outside code blocks, in order."""
    previous = None
    headings = []
    for _, line in prose_lines(text, blank_inline_code=False):
        atx = ATX_HEADING.match(line)
        if atx:
            headings.append(atx.group(2) or "")
            previous = None
        elif previous and previous.strip() and SETEXT_UNDERLINE.match(line):
            headings.append(previous.strip())
            previous = None
        else:
            previous = line
    return headings


def slug(heading):
    """GitHub's anchor for a heading's text (links and images rendered to their text, tags dropped)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@functools.cache
def anchors(path):
    """Every anchor of a page: its headings' slugs (repeats numbered) and explicit <a name/id>."""
    text = path.read_text(encoding="utf-8")
    seen, found = {}, set()
    for heading in heading_texts(text):
        base = slug(heading)
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    found.update(HTML_ANCHOR.findall(text))
    return frozenset(found)


def links(path):
    """(line number, target) of every link on the page."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1)
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)
        for match in IMG_SRC.finditer(line):
            yield number, next(group for group in match.groups() if group is not None)


def broken(path, target):
    """Why `target`, linked from `path`, does not resolve; None when it does."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target:
        return "empty target"
    if EXTERNAL.match(target):
        return None
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return f"a scheme this test does not follow: {target}"
    file_part, _, fragment = target.partition("#")
    file_part = urllib.parse.unquote(file_part.partition("?")[0])
    if file_part.startswith("/"):
        resolved = ROOT / file_part.lstrip("/")
    else:
        resolved = (path.parent / file_part) if file_part else path
    if not resolved.exists():
        return f"no such file: {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}"
    if fragment:
        if resolved.is_dir() or resolved.suffix.lower() != ".md":
            return f"a fragment on a file that is not a markdown page: {target}"
        if urllib.parse.unquote(fragment) not in anchors(resolved.resolve()):
            return f"no heading with the anchor #{fragment} in {resolved.resolve().relative_to(ROOT)}"
    return None


def test_every_relative_link_resolves():
    problems = []
    count = 0
    for path in pages():
        for number, target in links(path):
            count += 1
            why = broken(path, target)
            if why:
                problems.append(f"{path.relative_to(ROOT)}:{number}: ({target}): {why}")
    assert count, "no links found: the parser is broken"
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems)


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail to a page of docs/"
    )


def test_the_slug_rule():
    assert slug("luigid on a network, behind a proxy") == "luigid-on-a-network-behind-a-proxy"
    assert slug("Real portals, and `make probe`") == "real-portals-and-make-probe"
    assert slug("`[scheduler]`") == "scheduler"
    assert slug("See it: `make demo-fleet`") == "see-it-make-demo-fleet"
    assert slug("The sandbox's portals") == "the-sandboxs-portals"
    assert slug("snake_case and [a link](x.md)") == "snake_case-and-a-link"
    text = "# A\n\n```sh\n# not a heading\n```\n\n## A\n\nB\n---\n"
    assert heading_texts(text) == ["A", "A", "B"]
