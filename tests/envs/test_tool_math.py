"""Tool-integrated arithmetic: the built-in products, the environment with the python tool, and the tiny
tool model's warm start (its conversations are rendered as the env runner renders an episode)."""

from __future__ import annotations

import ast

import pytest

from dapo_rllib.models.tiny import RECIPES, conversation_ids, python_call, tool_answer
from dapo_rllib.tasks.data.tool_arithmetic import generate_tool_arithmetic_problems, parse_product_question
from dapo_rllib.tasks.tools import HermesToolParser
from envs.tool_math_env import ToolMathEnv


def _python_value(code: str) -> int | None:
    """What python prints for `code` when it is a sum or product of two integer literals ("347 * 58"), else
    None (the model may write code python refuses, such as "810 + 01")."""
    try:
        expression = ast.parse(code.strip(), mode="eval").body
    except SyntaxError:
        return None
    operands = (getattr(expression, "left", None), getattr(expression, "right", None))
    if not isinstance(getattr(expression, "op", None), (ast.Add, ast.Mult)) or not all(
        isinstance(x, ast.Constant) and type(x.value) is int for x in operands
    ):
        return None
    return eval(compile(ast.Expression(expression), "<call>", "eval"))


def test_the_products_are_split_and_the_same_on_every_call():
    train = generate_tool_arithmetic_problems("train", 50)
    assert train == generate_tool_arithmetic_problems("train", 50)
    test = {p.prompt_text for p in generate_tool_arithmetic_problems("test")}
    assert len(test) == 200 and not test & {p.prompt_text for p in generate_tool_arithmetic_problems("train")}
    for problem in train:
        a, b = parse_product_question(problem.prompt_text)
        assert 100 <= a <= 999 and 10 <= b <= 99 and problem.ground_truth == str(a * b)
    with pytest.raises(ValueError, match="unknown tool_arithmetic split 'dev'"):
        generate_tool_arithmetic_problems("dev")


def test_the_env_offers_python_and_scores_the_answer_after_the_call():
    env = ToolMathEnv({"num_problems": 4})
    messages, info = env.reset(options={"problem_index": 2})
    problem = env.problem(2)
    a, b = parse_product_question(messages[0]["content"])
    assert [tool["function"]["name"] for tool in info["tools"]] == ["python"]
    call = python_call(f"{a} * {b}")
    reply, reward, terminated, _, step_info = env.step(
        {"role": "assistant", "content": call, "tool_calls": HermesToolParser().parse(call)}
    )
    assert reply == [{"role": "tool", "name": "python", "content": f"{a * b}\n"}]
    assert (reward, terminated, step_info["tool_calls"]) == (0.0, False, 1)
    _, reward, terminated, _, step_info = env.step(f"Answer: {problem.ground_truth}")
    assert (reward, terminated, step_info["acc"], step_info["scorer"]) == (1.0, True, True, "math_dapo")


def test_the_env_checks_its_sandbox_settings():
    with pytest.raises(ValueError, match="ToolMathEnv 'timeout_s' must be a finite number of seconds > 0, got 0"):
        ToolMathEnv({"timeout_s": 0})


def test_the_warm_start_imitates_three_ways_of_answering():
    (problem,) = generate_tool_arithmetic_problems("train", 1)
    a, b = parse_product_question(problem.prompt_text)
    output = {"role": "tool", "content": f"{a * b}\n"}
    assert tool_answer(problem, "tool") == [python_call(f"{a} * {b}"), output, f"Answer: {a * b}"]
    wrong = {"role": "tool", "content": f"{a + b}\n"}
    assert tool_answer(problem, "wrong expression") == [python_call(f"{a} + {b}"), wrong, f"Answer: {a + b}"]
    assert tool_answer(problem, "no tool") == [f"Answer: {a * b}"]
    recipe = RECIPES["tool_arithmetic"]
    assert recipe.correct(problem, python_call(f"{a} * {b}")) and not recipe.correct(problem, python_call(f"{a} + {b}"))


def test_a_warm_start_conversation_trains_on_the_models_turns_only(tiny_tool_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tool_model_path)
    (problem,) = generate_tool_arithmetic_problems("train", 1)
    ids, mask = conversation_ids(RECIPES["tool_arithmetic"], tokenizer, problem, "tool")
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    call, output, answer = tool_answer(problem, "tool")
    assert trained == f"{call}<|im_end|>{answer}<|im_end|>"
    text = tokenizer.decode(ids)
    assert f"<tool_response>\n{output['content']}\n</tool_response>" in text and text.startswith(
        "<|im_start|>system\nTools: python(code)."
    )


def test_tool_calls_run_in_the_real_loop(ray_session, tiny_tool_model_path):
    """The tiny tool model through the env runner: its calls run in the sandbox and their output follows the
    call in the episode's sequence, rendered by the template; the first turn stops at the end of the call."""
    from tests.support.runs import tiny_config

    config = tiny_config(
        tiny_tool_model_path, max_turns=3, max_response_length=96, overlong_buffer_len=0, dynamic_sampling=False
    ).environment("dapo_tool_math", env_config={"num_problems": 20})
    algo = config.build_algo()
    try:
        runner = algo.env_runner
        episodes = runner.sample(requests=[(i, 500 + i) for i in range(4)])
        with_calls = [ep for ep in episodes if ep.get_extra_model_outputs("tool_calls", 0) > 0]
        assert with_calls, "the tiny tool model called no tool in 16 episodes"
        for ep in with_calls:
            call = runner.tokenizer.decode(ep.get_actions(0))
            assert call.startswith("<tool_call>") and call.endswith("</tool_call>")  # stopped at the call's end
            (parsed,) = HermesToolParser().parse(call)
            if len(ep) == 1:  # the tool's output (a traceback, say) ran past the episode's budget
                assert ep.is_truncated
                continue
            # The end of the turn, then the tool's output in a user turn, then the next turn's start.
            after = runner.tokenizer.decode(ep.get_observations(1))
            assert after.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
            assert after.endswith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
            value = (
                _python_value(parsed.arguments["code"]) if parsed.error is None and parsed.name == "python" else None
            )
            if value is not None:
                assert after == (
                    f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{value}\n\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n"
                )
    finally:
        algo.stop()
