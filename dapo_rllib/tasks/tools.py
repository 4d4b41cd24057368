"""Tools a language environment offers the model: what a tool is, how calls are read from the model's
text, how they run, and the built-in `python` tool.

A :class:`Tool` is a name, a JSON-schema description of its arguments and a function. The schemas reach
the model through the tokenizer's chat template (``apply_chat_template(..., tools=[tool.schema ...])``, the
Hugging Face convention; `dapo_rllib.tasks.chat_turns`). The model calls a tool in the text of its turn; a
parser (the ``tool_call_format`` setting, :data:`TOOL_CALL_PARSERS`) reads the calls, by default in
Qwen2.5's (Hermes) format::

    <tool_call>
    {"name": "python", "arguments": {"code": "print(123 * 45)"}}
    </tool_call>

:func:`run_tool_call` runs one call and always returns a :class:`ToolResult`: a call that is malformed,
names an unknown tool, has arguments that do not match the schema, or whose function raises becomes an
error message the model sees, counted by kind (:class:`ToolErrorKind`), never an exception of the run.
Plain Python, no Ray.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from dapo_rllib.tasks.sandbox import Sandbox

__all__ = [
    "HermesToolParser",
    "PYTHON_TOOL_SCHEMA",
    "TOOL_CALL_PARSERS",
    "Tool",
    "ToolCall",
    "ToolCallParser",
    "ToolErrorKind",
    "ToolResult",
    "load_tool_call_parser",
    "python_tool",
    "run_tool_call",
]


class ToolErrorKind(StrEnum):
    """Why a tool call gave an error message instead of a result (counted per kind in the metrics)."""

    MALFORMED = "malformed"  # the call's text is not a {"name", "arguments"} JSON object
    UNKNOWN_TOOL = "unknown_tool"  # no tool of that name is offered
    BAD_ARGUMENTS = "bad_arguments"  # the arguments do not match the tool's JSON schema
    TOOL_RAISED = "tool_raised"  # the tool's function raised
    TIMEOUT = "timeout"  # the tool ran out of time (the python tool's sandbox limit)


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    Attributes:
        name: What the model calls it.
        description: What it does, for the model.
        parameters: JSON schema of its arguments (an ``"object"`` schema).
        function: ``function(**arguments)`` -> the result text the model sees. It may return a
            :class:`ToolResult` to flag an error of its own (the python tool's timeouts).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., str | ToolResult] = field(compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", self.name)):
            raise ValueError(f"a tool name must be an identifier-like str, got {self.name!r}")
        if not (isinstance(self.parameters, Mapping) and self.parameters.get("type") == "object"):
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON schema of type 'object', got {self.parameters!r}"
            )
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(dict(self.parameters))

    @property
    def schema(self) -> dict[str, Any]:
        """The tool as chat templates take it (``{"type": "function", "function": {...}}``)."""
        return function_schema(self.name, self.description, self.parameters)


def function_schema(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's schema as chat templates take it."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": dict(parameters)}}


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote: a tool name and its arguments, or why the text is not a call.

    Attributes:
        name: The tool's name (None when the call is malformed).
        arguments: The arguments (None when the call is malformed).
        error: Why the call's text could not be read (None for a well-formed call).
        text: The call's text as the model wrote it.
    """

    name: str | None
    arguments: dict[str, Any] | None
    error: str | None = None
    text: str = ""


@dataclass(frozen=True)
class ToolResult:
    """What a call gave: the text the model sees, and the error kind when it failed."""

    content: str
    error: ToolErrorKind | None = None
    duration_s: float = 0.0


class ToolCallParser(Protocol):
    """Reads tool calls from the text of a model turn (the ``tool_call_format`` setting)."""

    #: Strings that end a model turn after a call (generation stops there; they stay in the turn).
    stop: tuple[str, ...]

    def parse(self, text: str) -> list[ToolCall]:
        """Every call in ``text``, in order; malformed ones with their ``error`` set."""
        ...


class HermesToolParser:
    """Qwen2.5's (Hermes) format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

    ``arguments`` may also be a JSON string holding the object (some models write it that way). An
    opening tag without its closing tag (a turn cut by the length limit) is a malformed call.
    """

    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    stop = (CLOSE,)

    def parse(self, text: str) -> list[ToolCall]:
        calls = []
        position = 0
        while (start := text.find(self.OPEN, position)) >= 0:
            end = text.find(self.CLOSE, start)
            if end < 0:
                calls.append(ToolCall(None, None, f"{self.OPEN} without {self.CLOSE}", text[start:]))
                break
            calls.append(self._read(text[start : end + len(self.CLOSE)], text[start + len(self.OPEN) : end]))
            position = end + len(self.CLOSE)
        return calls

    def _read(self, text: str, body: str) -> ToolCall:
        try:
            call = json.loads(body)
        except json.JSONDecodeError as error:
            return ToolCall(None, None, f"not JSON: {error}", text)
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            return ToolCall(None, None, 'expected a JSON object {"name": str, "arguments": {...}}', text)
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as error:
                return ToolCall(None, None, f"arguments are a string that is not JSON: {error}", text)
        if not isinstance(arguments, dict):
            return ToolCall(None, None, f"arguments must be a JSON object, got {type(arguments).__name__}", text)
        return ToolCall(call["name"], arguments, None, text)


#: Tool-call formats by name (the ``tool_call_format`` setting also takes "package.module:Class").
TOOL_CALL_PARSERS: dict[str, type] = {"hermes": HermesToolParser}


def load_tool_call_parser(spec: str) -> ToolCallParser:
    """The parser named ``spec``: a key of :data:`TOOL_CALL_PARSERS` or an import path ``"package.module:Class"``.

    Raises:
        ValueError: ``spec`` names no parser, or the class lacks ``parse``/``stop``.
    """
    if spec in TOOL_CALL_PARSERS:
        parser = TOOL_CALL_PARSERS[spec]()
    elif isinstance(spec, str) and ":" in spec:
        import importlib

        module_name, _, attribute = spec.partition(":")
        try:
            parser = getattr(importlib.import_module(module_name), attribute)()
        except (ImportError, AttributeError, TypeError) as error:
            raise ValueError(f"tool_call_format {spec!r} cannot be loaded: {error}") from None
    else:
        raise ValueError(
            f"tool_call_format must be one of {sorted(TOOL_CALL_PARSERS)} or an import path "
            f"'package.module:Class', got {spec!r}"
        )
    if not (callable(getattr(parser, "parse", None)) and isinstance(getattr(parser, "stop", None), tuple)):
        raise ValueError(f"tool_call_format {spec!r} needs a parse(text) method and a tuple of stop strings")
    return parser


def run_tool_call(call: ToolCall, tools: Mapping[str, Tool]) -> ToolResult:
    """Run ``call`` with the tool of its name; every failure is a :class:`ToolResult` with its error kind."""
    import jsonschema

    start = time.perf_counter()

    def failed(kind: ToolErrorKind, message: str) -> ToolResult:
        return ToolResult(f"Error: {message}", kind, time.perf_counter() - start)

    if call.error is not None:
        return failed(ToolErrorKind.MALFORMED, f"malformed tool call ({call.error})")
    tool = tools.get(call.name)
    if tool is None:
        return failed(ToolErrorKind.UNKNOWN_TOOL, f"unknown tool {call.name!r}; the tools are {sorted(tools)}")
    try:
        jsonschema.validate(call.arguments, dict(tool.parameters))
    except jsonschema.ValidationError as error:
        return failed(
            ToolErrorKind.BAD_ARGUMENTS, f"arguments of {tool.name!r} do not match its schema: {error.message}"
        )
    try:
        result = tool.function(**call.arguments)
    except Exception as error:
        return failed(ToolErrorKind.TOOL_RAISED, f"tool {tool.name!r} raised {type(error).__name__}: {error}")
    if isinstance(result, ToolResult):
        return ToolResult(result.content, result.error, time.perf_counter() - start)
    if not isinstance(result, str):
        return failed(ToolErrorKind.TOOL_RAISED, f"tool {tool.name!r} returned {type(result).__name__}, not text")
    return ToolResult(result, None, time.perf_counter() - start)


def run_tool_calls(calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> list[ToolResult]:
    """Each call's result, in order (the calls of one turn run one after another)."""
    return [run_tool_call(call, tools) for call in calls]


# ----- the built-in python tool ------------------------------------------------------------------

PYTHON_TOOL_DESCRIPTION = (
    "Run Python code and see its output. The value of a final expression is printed, as in a notebook."
)
PYTHON_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "The Python code to run."}},
    "required": ["code"],
    "additionalProperties": False,
}


#: The python tool's schema: what prompts show of it (for rendering them without a sandbox).
PYTHON_TOOL_SCHEMA = function_schema("python", PYTHON_TOOL_DESCRIPTION, PYTHON_PARAMETERS)


def python_tool(sandbox: Sandbox) -> Tool:
    """The ``python`` tool: runs the code in ``sandbox`` (its limits) and returns stdout and stderr.

    A final expression statement is printed (``123 * 45`` shows ``5535``). A timeout, a crash or a
    non-zero exit is a result the model sees (the traceback is on stderr); a timeout is also counted as
    a :attr:`ToolErrorKind.TIMEOUT`.
    """

    def run_python(code: str) -> ToolResult:
        result = sandbox.run(_print_last_expression(code))
        output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
        if result.timed_out:
            limit = sandbox.limits.timeout_s
            return ToolResult(f"{output}\nError: the code ran past the {limit:g} s time limit", ToolErrorKind.TIMEOUT)
        if result.output_truncated:
            output += "\n[output cut at the sandbox's limit]"
        if result.exit_code not in (0, None) and not output:
            output = f"exit status {result.exit_code}"
        return ToolResult(output)

    schema = PYTHON_TOOL_SCHEMA["function"]
    return Tool(schema["name"], schema["description"], schema["parameters"], run_python)


def _print_last_expression(code: str) -> str:
    """``code`` with the value of its last statement shown when that is an expression other than None, as a
    notebook does (code that does not parse is left as it is: Python's own SyntaxError is the answer)."""
    try:
        module = ast.parse(code)
    except SyntaxError:
        return code
    if not (module.body and isinstance(module.body[-1], ast.Expr)):
        return code
    last = module.body[-1]
    shown = ast.parse("if _value_ is not None:\n    print(repr(_value_))").body
    assign = ast.Assign([ast.Name("_value_", ast.Store())], last.value)
    module.body[-1:] = [ast.copy_location(assign, last), *shown]
    return ast.unparse(ast.fix_missing_locations(module))
