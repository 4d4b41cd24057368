"""Values that cross a sandbox's boundary: data only, never objects.

A code judge passes arguments to the candidate's functions and gets their results back across
sandboxes. Only data crosses: JSON, plus the Python literals that tests compare, as a tree of JSON
values where each non-JSON value is a one-key object naming its type:

=============================  =====================================================
``None``, bool, int, str, list  themselves
float                           itself; ``{"float": "inf" | "-inf" | "nan"}`` when not finite
tuple, set, frozenset           ``{"tuple" | "set" | "frozenset": [items]}``
dict (any data keys)            ``{"dict": [[key, value], ...]}``
bytes                           ``{"bytes": "<hex>"}``
complex                         ``{"complex": [real, imag]}``
=============================  =====================================================

:func:`load` builds values from a tree with nothing but these constructors: no ``pickle``, no
``eval``, no class looked up by name. So what a test program compares is a plain value whose
``__eq__`` is the builtin type's, whatever object the candidate returned: an object that claims to
equal everything cannot cross, only its data can. A subclass of these types (a namedtuple, an
``OrderedDict``, a ``Counter``, an ``IntEnum``) crosses as its base type's content, read with the
base type's own methods. Anything else raises :class:`NotData`, as do trees deeper than
:data:`MAX_DEPTH` and ints past Python's int/str conversion limit.

This module is stdlib-only and free of imports from this project: its source also runs inside the
sandboxes (:mod:`dapo_rllib.tasks.rewards.program_judge`), where :func:`dump` and :func:`to_json` write what
leaves them. So at its top it imports only ``math`` (built into the interpreter): ``json`` pulls in
``re`` and costs a sandboxed run about a third of its start-up (8-10 ms of CPU here); the trusted side
parses with ``json`` (:func:`parse_json`, imported when called).
"""

import math

#: Deepest nesting of containers that crosses (the JSON parser's own recursion is deeper).
MAX_DEPTH = 100


class NotData(ValueError):
    """A value (or a tree) that is not data of the kinds listed in the module docstring."""


def dump(value, _depth=0):
    """The JSON tree of ``value`` (``json.dumps`` it to send it).

    Raises:
        NotData: ``value`` holds something that is not data, or nests deeper than :data:`MAX_DEPTH`.
    """
    if _depth > MAX_DEPTH:
        raise NotData("nested deeper than %d" % MAX_DEPTH)
    if value is None or value is True or value is False:
        return value
    deeper = _depth + 1
    # Exact types first; subclasses are read through their base type's methods (never their own).
    kind = type(value)  # not isinstance: an object can fake its __class__
    for base in _BASES:
        if issubclass(kind, base):
            return _DUMPERS[base](value, deeper)
    raise NotData("a %s is not data" % kind.__name__)


def _dump_float(value, depth):
    value = float.__float__(value)
    return value if math.isfinite(value) else {"float": float.__repr__(value)}


def _dump_int(value, depth):
    value = int.__int__(value)
    try:
        int.__repr__(value)  # past sys.get_int_max_str_digits: no JSON for it
    except ValueError:
        raise NotData("an int of more digits than Python converts to text") from None
    return value


def _dump_items(items, depth):
    return [dump(item, depth) for item in items]


_DUMPERS = {
    bool: lambda value, depth: bool(int.__int__(value)),
    int: _dump_int,
    float: _dump_float,
    str: lambda value, depth: str.__str__(value),
    bytes: lambda value, depth: {"bytes": bytes.hex(value)},
    complex: lambda value, depth: {
        "complex": [_dump_float(complex.real.__get__(value), depth), _dump_float(complex.imag.__get__(value), depth)]
    },
    list: lambda value, depth: _dump_items(list.__iter__(value), depth),
    tuple: lambda value, depth: {"tuple": _dump_items(tuple.__iter__(value), depth)},
    frozenset: lambda value, depth: {"frozenset": _dump_items(frozenset.__iter__(value), depth)},
    set: lambda value, depth: {"set": _dump_items(set.__iter__(value), depth)},
    dict: lambda value, depth: {"dict": [[dump(k, depth), dump(v, depth)] for k, v in dict.items(value)]},
}
# bool before int (a bool is an int).
_BASES = tuple(_DUMPERS)


def load(tree, _depth=0):
    """The value of a JSON tree made by :func:`dump` (as ``json.loads`` parsed it).

    Raises:
        NotData: ``tree`` is not such a tree: an unknown or malformed tag, an unhashable set item or
            dict key, or nesting deeper than :data:`MAX_DEPTH`.
    """
    if _depth > MAX_DEPTH:
        raise NotData("nested deeper than %d" % MAX_DEPTH)
    kind = type(tree)
    if tree is None or kind in (bool, int, str):
        return tree
    if kind is float:
        if not math.isfinite(tree):  # the parser's NaN/Infinity: not the tagged form
            raise NotData("a non-finite float must be tagged")
        return tree
    deeper = _depth + 1
    if kind is list:
        return [load(item, deeper) for item in tree]
    if kind is not dict or len(tree) != 1:
        raise NotData("expected a JSON value or a one-key tag object, got %s" % _shown(tree))
    ((tag, payload),) = tree.items()
    try:
        if tag == "float" and payload in ("inf", "-inf", "nan"):
            return float(payload)
        if tag == "bytes" and type(payload) is str:
            return bytes.fromhex(payload)
        if tag == "complex" and type(payload) is list and len(payload) == 2:
            real, imag = (load(part, deeper) for part in payload)
            if type(real) is float and type(imag) is float:
                return complex(real, imag)
        if type(payload) is list:
            if tag in _CONTAINERS:
                return _CONTAINERS[tag](load(item, deeper) for item in payload)
            if tag == "dict" and all(type(pair) is list and len(pair) == 2 for pair in payload):
                return {load(key, deeper): load(value, deeper) for key, value in payload}
    except TypeError as error:  # an unhashable set item or dict key
        raise NotData(str(error)) from None
    except ValueError as error:  # malformed hex
        raise NotData("bad %s: %s" % (tag, error)) from None
    raise NotData("unknown or malformed tag %s" % _shown(tree))


_CONTAINERS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def to_json(tree):
    """Compact JSON text of ``tree`` (None, bool, int, finite float, str, lists, dicts with str keys),
    all ASCII; what :func:`parse_json` (``json.loads``) reads back to the same tree.

    Raises:
        NotData: Something else in ``tree`` (a non-finite float included: :func:`dump` tags those).
    """
    kind = type(tree)
    if tree is None:
        return "null"
    if kind is bool:
        return "true" if tree else "false"
    if kind is int:
        return int.__repr__(tree)
    if kind is float and math.isfinite(tree):
        return float.__repr__(tree)  # "1e-05", "1e+16": JSON numbers too
    if kind is str:
        return _quoted(tree)
    if kind is list:
        return "[" + ",".join([to_json(item) for item in tree]) + "]"
    if kind is dict and all(type(key) is str for key in tree):
        return "{" + ",".join([_quoted(key) + ":" + to_json(item) for key, item in tree.items()]) + "}"
    raise NotData("no JSON for a %s" % kind.__name__)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _quoted(text):
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'
    parts = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            parts.append(_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            parts.append(char)
        elif code < 0x10000:  # lone surrogates included: json.loads reads them back as they are
            parts.append("\\u%04x" % code)
        else:
            code -= 0x10000
            parts.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
    return '"' + "".join(parts) + '"'


def dumps(value):
    """``value`` as one line of JSON (see :func:`dump`)."""
    return to_json(dump(value))


def loads(text):
    """The value of one line made by :func:`dumps`.

    Raises:
        NotData: Not JSON, or not a tree of data (see :func:`load`).
    """
    return load(parse_json(text))


def parse_json(text):
    """``json.loads`` of ``text`` without the parser's NaN/Infinity, raising :class:`NotData` for anything
    that is not JSON (a 5000-digit int and too deep nesting included)."""
    import json

    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as error:
        raise NotData("not JSON: %s" % (error,)) from None


def _refuse_constant(name):
    raise ValueError("%s is not JSON" % name)


def _shown(tree):
    text = repr(tree)
    return text if len(text) <= 80 else text[:80] + "..."
