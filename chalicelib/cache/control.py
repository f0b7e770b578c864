"""The client's say: ``Cache-Control`` and ``Pragma`` read into what a request may do with the
cache (read it, write it, how old an answer it takes)."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

# one element of a Cache-Control or Pragma list: a name, maybe "=" and a token or quoted string
_DIRECTIVE = re.compile(r'([^\s=,"]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^\s,"]*))?')
_DELTA_SECONDS = re.compile(r"[0-9]{1,10}")
# what this cache does something with (RFC 9111 5.4: Pragma counts only without these)
_UNDERSTOOD = frozenset({"no-cache", "no-store", "max-age"})


@dataclasses.dataclass(frozen=True)
class CacheControl:
    """A request's cache directives (RFC 9111 5.2.1), from ``Cache-Control`` and ``Pragma``.

    ``no-cache`` and ``max-age=0`` skip the read (the fresh answer is still stored);
    ``max-age=N`` reads only answers stored at most N seconds ago; ``no-store`` skips the
    write (a cached answer may still be read: RFC 9111's request no-store forbids storing, not
    serving). ``Pragma: no-cache`` is ``no-cache`` when no directive of ``Cache-Control`` is
    one this cache understands (RFC 9111 5.4). A ``max-age`` that is not one non-negative
    integer (repeated, negative, a word) skips the read: a doubtful freshness demand is met
    with a fresh answer.
    """

    read: bool = True
    write: bool = True
    max_age: int | None = None
    """The oldest answer (seconds since it was stored) the client accepts; None: any."""

    @classmethod
    def parse(cls, header: str | None, pragma: str | None = None) -> CacheControl:
        """The directives of one ``Cache-Control`` value and one ``Pragma`` (None: absent)."""
        return cls.from_lines([] if header is None else [header],
                              [] if pragma is None else [pragma])

    @classmethod
    def from_lines(cls, cache_control: Sequence[str], pragma: Sequence[str] = ()
                   ) -> CacheControl:
        """The directives of every field line of ``Cache-Control`` and ``Pragma`` (several
        lines of one field are one comma-separated list, RFC 9110 5.3)."""
        directives = _directives(cache_control)
        if not directives.keys() & _UNDERSTOOD and "no-cache" in _directives(pragma):
            directives["no-cache"] = [""]
        max_age = _max_age(directives.get("max-age"))
        read = "no-cache" not in directives and max_age != 0
        return cls(read=read, write="no-store" not in directives,
                   max_age=max_age if read else None)

    def accepts(self, age: float) -> bool:
        """Whether an answer stored ``age`` seconds ago may be served."""
        return self.read and (self.max_age is None or age <= self.max_age)


def _directives(lines: Sequence[str]) -> dict[str, list[str]]:
    """Directive names (lower-cased) and their values (unquoted), in order, of every line."""
    found: dict[str, list[str]] = {}
    for line in lines:
        for match in _DIRECTIVE.finditer(line):
            value = match[2] or ""
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            found.setdefault(match[1].lower(), []).append(value)
    return found


def _max_age(values: list[str] | None) -> int | None:
    """``max-age``'s seconds; 0 (no read) when it is invalid or given more than once."""
    if values is None:
        return None
    if len(values) != 1 or not _DELTA_SECONDS.fullmatch(values[0]):
        return 0
    return int(values[0])


def request_cache_control(headers: Mapping[str, str],
                          multi_value_headers: Mapping[str, Sequence[str]] | None = None
                          ) -> CacheControl:
    """A request's :class:`CacheControl`, from every line of its headers.

    Args:
        headers: the request's headers, case-insensitive (API Gateway keeps only the last
            line of a repeated header here).
        multi_value_headers: API Gateway's ``multiValueHeaders`` (every line, names as sent),
            or None where there are none (``chalice local``).
    """
    def lines(name: str) -> list[str]:
        every = [value for key, values in (multi_value_headers or {}).items()
                 if key.lower() == name for value in values or ()]
        single = headers.get(name)
        return every or ([] if single is None else [single])

    return CacheControl.from_lines(lines("cache-control"), lines("pragma"))


BYPASSED = CacheControl(read=False, write=False)
NO_DIRECTIVES = CacheControl()
"""A request that says nothing: read and write, any age."""
