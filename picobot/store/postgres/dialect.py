"""The store's SQL, rewritten for PostgreSQL: one set of store operations, two engines.

The store's operations are written in SQLite's SQL. On PostgreSQL each statement is
rewritten once (cached by its text) by a closed set of rules, each a construct the
store uses and PostgreSQL spells differently:

- placeholders: ``?N`` becomes ``$N`` and a bare ``?`` the next number (SQLite's own
  numbering), run through psycopg's raw cursor, so a parameter may be used twice;
- ``INSERT OR IGNORE`` becomes ``INSERT ... ON CONFLICT DO NOTHING``;
- ``x IN (SELECT value FROM json_each(?N))`` becomes ``x = ANY($N)`` (``NOT IN``:
  ``<> ALL``), the JSON array parameter passed as a list; as a table, ``FROM
  json_each(?N)`` (of ids) is ``FROM unnest(CAST($N AS BIGINT[])) AS json_each(value)``;
- ``a IS b`` / ``a IS NOT b`` (not ``NULL``) become ``IS [NOT] DISTINCT FROM``;
- scalar ``MAX(a, b)`` / ``MIN(a, b)`` become ``GREATEST`` / ``LEAST``, ``instr`` is
  ``strpos``, ``json_extract(x, '$.k')`` is ``(x::jsonb ->> 'k')``, ``CAST(... AS
  INTEGER)`` is ``BIGINT``, ``LIMIT -1`` is ``LIMIT ALL``, ``WHERE 1`` is ``WHERE
  TRUE``, and ``sqlite_master`` lists the tables of the current schema;
- a subquery in ``FROM`` without an alias (SQLite needs none) gets one;
- ``LIMIT ?`` given a negative number (SQLite's "no limit") is sent ``NULL``, which
  PostgreSQL reads as ``LIMIT ALL``;
- the sealing functions, which need the user's key and so cannot run in the server:
  ``picobot_seal``, ``picobot_seal_bytes`` and ``picobot_tag`` of parameters become a
  new parameter computed in Python, and ``picobot_open[_bytes](column) AS name`` in a
  select list returns the column as stored, opened in Python as it is fetched.

A statement outside these rules (a sealing function of a column, say) raises
:class:`UnsupportedSQL` naming it, at its first use: the store's tests run on both
engines, so a statement that only SQLite understands is found there, not in production.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum


class UnsupportedSQL(ValueError):
    """A statement the PostgreSQL rewrite has no rule for."""


class Computed(Enum):
    """How a parameter added by the rewrite is computed from the caller's."""

    SEAL = "picobot_seal"
    SEAL_BYTES = "picobot_seal_bytes"
    TAG = "picobot_tag"


class Opened(Enum):
    """How a returned column is opened."""

    TEXT = "picobot_open"
    BYTES = "picobot_open_bytes"


@dataclass(frozen=True)
class Statement:
    """A statement rewritten for PostgreSQL.

    Before numbering, the first ``given`` are the caller's parameters, in order;
    ``lists`` are those of them passed as JSON arrays that go as lists; each of
    ``computed`` is one more, ``(function, user parameter, value parameter)`` (0-based);
    ``limits`` are those of the caller's that are a ``LIMIT``, sent ``NULL`` if negative;
    ``opened`` maps a returned column's name to how it is opened. ``sent``: which of
    those values (0-based: the caller's, then the computed) go as ``$1..$k``.
    """

    sql: str
    given: int
    lists: frozenset[int]
    limits: frozenset[int]
    computed: tuple[tuple[Computed, int, int], ...]
    opened: dict[str, Opened]
    sent: tuple[int, ...]


_CATALOG = (
    "(SELECT 'table' AS type, tablename AS name FROM pg_tables"
    " WHERE schemaname = current_schema()) AS sqlite_master"
)
_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_MARK = "\x00{}\x00"
_PLACEHOLDER = re.compile(r"\?(\d*)")
_JSON_EACH = re.compile(
    r"\b(NOT\s+)?IN\s*\(\s*SELECT\s+value\s+FROM\s+json_each\(\s*\$(\d+)\s*\)\s*\)", re.I
)
_JSON_EACH_TABLE = re.compile(r"\bFROM\s+json_each\(\s*\$(\d+)\s*\)", re.I)
_IS_NOT = re.compile(r"\bIS\s+NOT\s+(?!NULL\b|DISTINCT\b|TRUE\b|FALSE\b)", re.I)
_IS = re.compile(r"\bIS\s+(?!NOT\b|NULL\b|DISTINCT\b|TRUE\b|FALSE\b)", re.I)
_INSERT_OR_IGNORE = re.compile(r"\bINSERT\s+OR\s+IGNORE\s+INTO\b", re.I)
_LIMIT_PARAMETER = re.compile(r"\bLIMIT\s+\$(\d+)", re.I)
_RETURNING = re.compile(r"\bRETURNING\b", re.I)
_WORDS = (
    (re.compile(r"\binstr\(", re.I), "strpos("),
    (re.compile(r"\bAS\s+INTEGER\s*\)", re.I), "AS BIGINT)"),
    (re.compile(r"\bAS\s+REAL\s*\)", re.I), "AS DOUBLE PRECISION)"),
    (re.compile(r"\bLIMIT\s+-1\b", re.I), "LIMIT ALL"),
    (re.compile(r"\bsqlite_master\b", re.I), _CATALOG),
    (re.compile(r"\bWHERE\s+1\b(?!\s*[=<>!])", re.I), "WHERE TRUE"),
)
_FROM_SUBQUERY = re.compile(r"\bFROM\s*\(\s*SELECT\b", re.I)
_ALIASED = re.compile(
    r"\s*(?:AS\s+)?(?!(?:{})\b)[A-Za-z_]\w*".format(
        "|".join(
            (
                "WHERE",
                "ORDER",
                "GROUP",
                "HAVING",
                "LIMIT",
                "OFFSET",
                "UNION",
                "EXCEPT",
                "INTERSECT",
                "JOIN",
                "LEFT",
                "INNER",
                "CROSS",
                "ON",
                "WINDOW",
                "RETURNING",
            )
        )
    ),
    re.I,
)
_SCALAR = re.compile(r"\b(MAX|MIN)\(", re.I)
_JSON_EXTRACT = re.compile(r"\bjson_extract\(", re.I)
_SEALING = re.compile(r"\b(picobot_seal_bytes|picobot_seal|picobot_tag)\(", re.I)
_OPENING = re.compile(r"\b(picobot_open_bytes|picobot_open)\(", re.I)
_ALIAS = re.compile(r"\s+AS\s+(\w+)", re.I)
_ANY_FUNCTION = re.compile(r"\bpicobot_\w+\(", re.I)
_PARAM = re.compile(r"\$(\d+)")


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> Statement:
    """``sql`` (SQLite's) rewritten for PostgreSQL; raises :class:`UnsupportedSQL`."""
    literals: list[str] = []

    def hide(match: re.Match[str]) -> str:
        literals.append(match.group(0))
        return _MARK.format(len(literals) - 1)

    code = _LITERAL.sub(hide, sql)
    code, given = _number_placeholders(code)
    code, lists = _json_lists(code)
    limits = frozenset(int(m.group(1)) - 1 for m in _LIMIT_PARAMETER.finditer(code))
    code = _IS_NOT.sub("IS DISTINCT FROM ", code)
    code = _IS.sub("IS NOT DISTINCT FROM ", code)
    for pattern, replacement in _WORDS:
        code = pattern.sub(replacement, code)
    code = _insert_or_ignore(code)
    code = _alias_subqueries(code)
    code = _scalar_extremes(code)
    code = _json_extract(code, literals)
    code, computed = _computed_parameters(code, given)
    code, opened = _opened_columns(code)
    if found := _ANY_FUNCTION.search(code):
        raise UnsupportedSQL(f"{found.group(0)[:-1]} is not available on PostgreSQL: {sql}")
    code, sent = _renumber(code)
    for index, literal in enumerate(literals):
        code = code.replace(_MARK.format(index), literal)
    return Statement(code, given, lists, limits, computed, opened, sent)


def _renumber(code: str) -> tuple[str, tuple[int, ...]]:
    """Number the parameters the statement uses ``$1..$k`` (the server cannot type a
    parameter it is sent but never sees: one only sealed is such a one)."""
    sent: list[int] = []

    def number(match: re.Match[str]) -> str:
        value = int(match.group(1)) - 1
        if value not in sent:
            sent.append(value)
        return f"${sent.index(value) + 1}"

    return _PARAM.sub(number, code), tuple(sent)


def _number_placeholders(code: str) -> tuple[str, int]:
    """``?N`` → ``$N``, ``?`` → the next number; returns the count of parameters."""
    highest = 0

    def number(match: re.Match[str]) -> str:
        nonlocal highest
        n = int(match.group(1)) if match.group(1) else highest + 1
        highest = max(highest, n)
        return f"${n}"

    return _PLACEHOLDER.sub(number, code), highest


def _json_lists(code: str) -> tuple[str, frozenset[int]]:
    lists: set[int] = set()

    def any_of(match: re.Match[str]) -> str:
        lists.add(int(match.group(2)) - 1)
        return f"<> ALL(${match.group(2)})" if match.group(1) else f"= ANY(${match.group(2)})"

    code = _JSON_EACH.sub(any_of, code)

    def table(match: re.Match[str]) -> str:
        lists.add(int(match.group(1)) - 1)
        return f"FROM unnest(CAST(${match.group(1)} AS BIGINT[])) AS json_each(value)"

    code = _JSON_EACH_TABLE.sub(table, code)
    if re.search(r"(?<!AS )\bjson_each\(", code, re.I):
        raise UnsupportedSQL(f"json_each outside 'IN (json_each)' and 'FROM json_each': {code}")
    return code, frozenset(lists)


def _insert_or_ignore(code: str) -> str:
    if not _INSERT_OR_IGNORE.search(code):
        return code
    code = _INSERT_OR_IGNORE.sub("INSERT INTO", code)
    if returning := _RETURNING.search(code):
        at = returning.start()
        return f"{code[:at].rstrip()} ON CONFLICT DO NOTHING {code[at:]}"
    return f"{code.rstrip().rstrip(';')} ON CONFLICT DO NOTHING"


def _arguments(code: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose ``(`` is at ``open_paren``, and the
    index just past its ``)``."""
    depth = 0
    args: list[str] = []
    start = open_paren + 1
    for i in range(open_paren, len(code)):
        ch = code[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(code[start:i].strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(code[start:i].strip())
            start = i + 1
    raise UnsupportedSQL(f"unbalanced parentheses: {code}")


def _alias_subqueries(code: str) -> str:
    """``FROM (SELECT ...)`` without an alias → ``FROM (SELECT ...) AS _subqueryN``."""
    at = 0
    count = 0
    while found := _FROM_SUBQUERY.search(code, at):
        open_paren = code.index("(", found.start())
        _, end = _arguments(code, open_paren)
        if not _ALIASED.match(code, end):
            count += 1
            code = f"{code[:end]} AS _subquery{count}{code[end:]}"
        at = open_paren + 1
    return code


def _scalar_extremes(code: str) -> str:
    """``MAX(a, b)`` → ``GREATEST(a, b)`` (one argument: the aggregate, unchanged)."""
    at = 0
    while found := _SCALAR.search(code, at):
        args, end = _arguments(code, found.end() - 1)
        if len(args) > 1:
            name = "GREATEST" if found.group(1).upper() == "MAX" else "LEAST"
            code = f"{code[: found.start()]}{name}({', '.join(args)}){code[end:]}"
        at = found.start() + 1
    return code


def _json_extract(code: str, literals: list[str]) -> str:
    """``json_extract(x, '$.k')`` → ``(x::jsonb ->> 'k')`` (text, as JSON scalars read)."""
    while found := _JSON_EXTRACT.search(code):
        args, end = _arguments(code, found.end() - 1)
        path = _literal(args[1], literals) if len(args) == 2 else None
        if path is None or not re.fullmatch(r"'\$\.\w+'", path):
            raise UnsupportedSQL(f"json_extract needs a literal '$.key' path: {code}")
        code = f"{code[: found.start()]}(({args[0]})::jsonb ->> '{path[3:-1]}'){code[end:]}"
    return code


def _literal(arg: str, literals: list[str]) -> str | None:
    match = re.fullmatch("\x00(\\d+)\x00", arg)
    return literals[int(match.group(1))] if match else None


def _parameter(arg: str) -> int | None:
    match = _PARAM.fullmatch(arg)
    return int(match.group(1)) - 1 if match else None


def _computed_parameters(
    code: str, given: int
) -> tuple[str, tuple[tuple[Computed, int, int], ...]]:
    """Each sealing call of two parameters becomes one more parameter."""
    computed: list[tuple[Computed, int, int]] = []
    while found := _SEALING.search(code):
        args, end = _arguments(code, found.end() - 1)
        user, value = (_parameter(a) for a in args) if len(args) == 2 else (None, None)
        if user is None or value is None:
            raise UnsupportedSQL(
                f"{found.group(1)} needs two parameters on PostgreSQL (pass the user id): {code}"
            )
        key = (Computed(found.group(1).lower()), user, value)
        if key not in computed:
            computed.append(key)
        number = given + computed.index(key) + 1
        code = f"{code[: found.start()]}${number}{code[end:]}"
    return code, tuple(computed)


def _opened_columns(code: str) -> tuple[str, dict[str, Opened]]:
    """``picobot_open(x) AS name`` → ``x AS name``, ``name`` opened as it is fetched."""
    opened: dict[str, Opened] = {}
    while found := _OPENING.search(code):
        args, end = _arguments(code, found.end() - 1)
        alias = _ALIAS.match(code, end)
        if len(args) != 1 or alias is None or _ANY_FUNCTION.search(args[0]):
            raise UnsupportedSQL(
                f"{found.group(1)} must be a select-list item 'picobot_open(x) AS name'"
                f" on PostgreSQL: {code}"
            )
        opened[alias.group(1).lower()] = Opened(found.group(1).lower())
        code = f"{code[: found.start()]}{args[0]}{code[end:]}"
    return code, opened
