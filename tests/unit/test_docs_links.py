"""Every relative link of README.md and of the pages of docs/ leads somewhere: the file exists
(inside the project) and, where the link names a heading (``page.md#heading``), the page has
that heading. No stack, no network: links with a scheme (``https:``, ``mailto:``) are not
followed. The README's quickstart links each page of the reference, so none is orphaned."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
# [text](target) and ![alt](target), the target without spaces, an optional "title" after it
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """The text outside fenced blocks and code spans (their brackets are not links)."""
    text = _FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    return _CODE_SPAN.sub(lambda span: " " * len(span.group(0)), text)


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every link of a page."""
    text = _prose(page.read_text())
    found = [(match.start(), match.group(1)) for match in _INLINE.finditer(text)]
    found += [(match.start(), match.group(1)) for match in _REFERENCE.finditer(text)]
    return [(text.count("\n", 0, start) + 1, target) for start, target in sorted(found)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text in lower case, links and code marks dropped,
    punctuation removed, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in a page (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for match in _HEADING.finditer(_FENCE.sub("", page.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each link of a page of the project at ``root``."""
    problems = []
    for line, target in links(page):
        if _SCHEME.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        where = f"{page.relative_to(root)}:{line}: {target}"
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.is_relative_to(root):
            problems.append(f"{where}: outside the project")
        elif not destination.exists():
            problems.append(f"{where}: no such file")
        elif fragment and destination.suffix == ".md" and unquote(fragment) not in anchors(
                destination):
            problems.append(f"{where}: no such heading in {destination.relative_to(root)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    problems = broken(page)
    assert not problems, "\n".join(problems)


def test_the_pages_have_links_to_check() -> None:
    """The link reader finds links at all (a reader that finds none passes everything)."""
    assert any(target.startswith("docs/") for _, target in links(ROOT / "README.md"))
    assert len(PAGES) > 2


def test_the_readme_links_every_docs_page() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for _, target in links(ROOT / "README.md") if not _SCHEME.match(target)}
    orphans = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not orphans, f"README.md links no docs page {orphans}"


def test_slugs_are_githubs() -> None:
    assert slug("Path A: SAM / CloudFormation (`make deploy`)") == \
        "path-a-sam--cloudformation-make-deploy"
    assert slug("CLI: `sagegate predict` and `sagegate resize`") == \
        "cli-sagegate-predict-and-sagegate-resize"
    assert slug("2. First answer") == "2-first-answer"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "docs").mkdir()
    (root / "README.md").write_text("# Title\n\n## 2. First answer\n")
    (root / "docs" / "API.md").write_text("# The API\n\n## `POST /predict`\n")
    page = root / "docs" / "PAGE.md"
    page.write_text("[gone](NOWHERE.md) [heading](API.md#no-such-heading)\n"
                    "[ok](../README.md#2-first-answer) [ok](API.md#post-predict) [here](#a-b)\n"
                    "`[code](not-a-link.md)` [web](https://example.com/x) [up](../../x.md)\n"
                    "```sh\n[fenced](not-a-link-either.md)\n```\n## A b\n")
    problems = broken(page, root)
    assert [problem.split(": ")[1] for problem in problems] == \
        ["NOWHERE.md", "API.md#no-such-heading", "../../x.md"], problems
    assert problems[2].endswith("outside the project"), problems
