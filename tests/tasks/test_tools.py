"""Tools (dapo_rllib.tasks.tools): reading calls from the model's text, running them, and every way a call fails
coming back to the model as a message, counted by kind; the python tool in the real sandbox; a problem
environment that offers tools."""

from __future__ import annotations

import pytest

from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits
from dapo_rllib.tasks.tools import (
    PYTHON_PARAMETERS,
    HermesToolParser,
    Tool,
    ToolCall,
    ToolErrorKind,
    load_tool_call_parser,
    python_tool,
    run_tool_call,
)
from envs.math_env import MathEnv

CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(123 * 45)"}}\n</tool_call>'


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxLimits(timeout_s=2.0, cpu_s=2, output_bytes=4096)) as box:
        yield box


def echo_tool(function=lambda code: f"ran {code}") -> Tool:
    return Tool("python", "Run code.", PYTHON_PARAMETERS, function)


# ----- parsing -------------------------------------------------------------------------------------


def test_hermes_parser_reads_calls_in_order():
    parser = HermesToolParser()
    text = f"Let me compute.\n{CALL}\nand {CALL.replace('123', '7')}"
    calls = parser.parse(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("python", {"code": "print(123 * 45)"}, None),
        ("python", {"code": "print(7 * 45)"}, None),
    ]
    assert calls[0].text == CALL
    assert parser.parse("Answer: 5535") == []
    assert parser.stop == ("</tool_call>",)


def test_hermes_parser_takes_arguments_given_as_a_json_string():
    (call,) = HermesToolParser().parse(
        '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"1\\"}"}</tool_call>'
    )
    assert (call.name, call.arguments) == ("python", {"code": "1"})


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<tool_call>{not json}</tool_call>", "not JSON"),
        ('<tool_call>["python"]</tool_call>', 'expected a JSON object {"name": str'),
        ('<tool_call>{"name": "python", "arguments": [1]}</tool_call>', "arguments must be a JSON object, got list"),
        ('<tool_call>{"name": "python", "arguments": "{x"}</tool_call>', "arguments are a string that is not JSON"),
        ('<tool_call>{"name": "python", "arguments": {"code": "1"}}', "<tool_call> without </tool_call>"),
    ],
)
def test_a_malformed_call_is_read_as_one_with_its_reason(text, error):
    (call,) = HermesToolParser().parse(text)
    assert call.name is None and call.arguments is None and error in call.error


def test_the_parser_setting_takes_a_name_or_an_import_path():
    assert isinstance(load_tool_call_parser("hermes"), HermesToolParser)
    assert isinstance(load_tool_call_parser("dapo_rllib.tasks.tools:HermesToolParser"), HermesToolParser)
    with pytest.raises(ValueError, match=r"tool_call_format must be one of \['hermes'\].*got 'json'"):
        load_tool_call_parser("json")
    with pytest.raises(ValueError, match="'dapo_rllib.tasks.tools:Nope' cannot be loaded"):
        load_tool_call_parser("dapo_rllib.tasks.tools:Nope")
    with pytest.raises(ValueError, match="needs a parse\\(text\\) method and a tuple of stop strings"):
        load_tool_call_parser("collections:OrderedDict")


# ----- running calls: every failure is a message of its kind -----------------------------------------


def test_a_good_call_runs_the_tool():
    result = run_tool_call(ToolCall("python", {"code": "x"}), {"python": echo_tool()})
    assert (result.content, result.error) == ("ran x", None)


@pytest.mark.parametrize(
    ("call", "function", "kind", "message"),
    [
        (ToolCall(None, None, "not JSON: ..."), None, ToolErrorKind.MALFORMED, "Error: malformed tool call (not JSON"),
        (
            ToolCall("shell", {"code": "ls"}),
            None,
            ToolErrorKind.UNKNOWN_TOOL,
            "Error: unknown tool 'shell'; the tools are ['python']",
        ),
        (
            ToolCall("python", {"source": "1"}),
            None,
            ToolErrorKind.BAD_ARGUMENTS,
            "Error: arguments of 'python' do not match its schema: 'code' is a required property",
        ),
        (
            ToolCall("python", {"code": 12}),
            None,
            ToolErrorKind.BAD_ARGUMENTS,
            "Error: arguments of 'python' do not match its schema: 12 is not of type 'string'",
        ),
        (
            ToolCall("python", {"code": "1"}),
            lambda code: 1 / 0,
            ToolErrorKind.TOOL_RAISED,
            "Error: tool 'python' raised ZeroDivisionError: division by zero",
        ),
        (
            ToolCall("python", {"code": "1"}),
            lambda code: 42,
            ToolErrorKind.TOOL_RAISED,
            "Error: tool 'python' returned int, not text",
        ),
    ],
)
def test_a_failed_call_is_an_error_message_of_its_kind(call, function, kind, message):
    tool = echo_tool() if function is None else echo_tool(function)
    result = run_tool_call(call, {"python": tool})
    assert result.error is kind
    assert result.content.startswith(message)


def test_a_tool_needs_a_name_and_an_object_schema():
    with pytest.raises(ValueError, match="identifier-like str, got 'two words'"):
        Tool("two words", "", PYTHON_PARAMETERS, str)
    with pytest.raises(ValueError, match="JSON schema of type 'object'"):
        Tool("f", "", {"type": "string"}, str)


# ----- the python tool in the sandbox ----------------------------------------------------------------


def test_python_tool_shows_output_and_the_last_expression(sandbox):
    tool = python_tool(sandbox)
    assert tool.function(code="print('hi')\n123 * 45").content == "hi\n5535\n"
    assert tool.function(code="x = 'a'\nx").content == "'a'\n"
    assert tool.function(code="print(1)").content == "1\n"  # print's None is not shown


def test_python_tool_errors_are_results_the_model_sees(sandbox):
    tool = python_tool(sandbox)
    crash = tool.function(code="1 / 0")
    assert crash.error is None and "ZeroDivisionError: division by zero" in crash.content
    syntax = tool.function(code="def f(:")
    assert "SyntaxError" in syntax.content
    timeout = tool.function(code="while True: pass")
    assert timeout.error is ToolErrorKind.TIMEOUT and "ran past the 2 s time limit" in timeout.content
    flood = tool.function(code="print('x' * 100_000)")
    assert flood.content.endswith("[output cut at the sandbox's limit]") and len(flood.content) < 5000


# ----- an environment with tools ------------------------------------------------------------------


class CalculatorMathEnv(MathEnv):
    """The arithmetic problems, with the python tool."""

    def __init__(self, config, sandbox):
        super().__init__(config)
        self.tools = (python_tool(sandbox),)


def test_a_problem_env_runs_tool_calls_then_scores_the_answer(sandbox):
    env = CalculatorMathEnv({"num_problems": 5}, sandbox)
    messages, info = env.reset(options={"problem_index": 0})
    assert info["tools"] == [env.tools[0].schema]
    calls = HermesToolParser().parse(CALL + CALL.replace('"name": "python"', '"name": "calc"'))
    observation, reward, terminated, truncated, step_info = env.step(
        {"role": "assistant", "content": CALL, "tool_calls": calls}
    )
    assert observation == [
        {"role": "tool", "name": "python", "content": "5535\n"},
        {"role": "tool", "name": "calc", "content": "Error: unknown tool 'calc'; the tools are ['python']"},
    ]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert step_info["tool_calls"] == 2 and step_info["tool_errors"] == {"unknown_tool": 1}
    answer = f"Answer: {env.problem(0).ground_truth}"
    _, reward, terminated, _, step_info = env.step({"role": "assistant", "content": answer, "tool_calls": []})
    assert (reward, terminated, step_info["acc"]) == (1.0, True, True)


def test_finish_rates_the_last_turn_as_the_answer(sandbox):
    env = CalculatorMathEnv({"num_problems": 5}, sandbox)
    env.reset(options={"problem_index": 0})
    env.step({"role": "assistant", "content": CALL, "tool_calls": HermesToolParser().parse(CALL)})
    reward, info = env.finish()  # the runner stopped the episode after a tool call: no answer given
    assert (reward, info["acc"], info["pred"]) == (-1.0, False, None)
    with pytest.raises(RuntimeError, match=r"finish\(\) called without an active episode"):
        env.finish()


def test_a_step_takes_text_or_an_assistant_message(sandbox):
    env = CalculatorMathEnv({"num_problems": 5}, sandbox)
    env.reset()
    with pytest.raises(TypeError, match="takes a turn's text or an assistant message"):
        env.step({"role": "user", "content": "hi"})
    with pytest.raises(TypeError, match="tool_calls must be dapo_rllib.tasks.tools.ToolCall objects"):
        env.step({"role": "assistant", "content": "", "tool_calls": [{"name": "python"}]})


def test_twins_share_problems_but_not_episodes(sandbox):
    env = CalculatorMathEnv({"num_problems": 5}, sandbox)
    a, b = env.spawn(), env.spawn()
    a.reset(options={"problem_index": 1})
    b.reset(options={"problem_index": 2})
    assert a.step(f"Answer: {env.problem(1).ground_truth}")[1] == 1.0
    assert b.step(f"Answer: {env.problem(1).ground_truth}")[1] == -1.0
    assert a.tools is env.tools and a.num_problems == env.num_problems
