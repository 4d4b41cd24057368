"""`rllib evaluate` on a Hugging Face model directory and a slice of the real AIME 2024 file.

The tiny arithmetic model scores ~0 on AIME: these tests check the pipeline and the report
(metric set, per-problem numbers, progress bars, repeated rows counted once), not the score.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dapo_rllib.cli.evaluate import evaluate
from dapo_rllib.reporting.tables import format_table
from tests.support import naive_scorers
from tests.support.paths import AIME_2024

RLLIB = str(Path(sys.executable).with_name("rllib"))
# The command imports a scorer named by module from the directory it runs in (as Ray's workers do).
SCORERS = Path(naive_scorers.__file__).parent
NUM_PROBLEMS = 3
COPIES = 32


def rllib(*args, cwd):
    proc = subprocess.run(
        [RLLIB, *map(str, args)],
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def aime_rows():
    rows = pq.read_table(AIME_2024).to_pylist()
    assert len(rows) == 960
    return rows


@pytest.fixture(scope="module")
def aime_slice(aime_rows, tmp_path_factory):
    """The first 3 AIME problems with all 32 copies of each (96 rows), as the file stores them."""
    wanted = list(dict.fromkeys(r["extra_info"]["index"] for r in aime_rows))[:NUM_PROBLEMS]
    rows = [r for r in aime_rows if r["extra_info"]["index"] in wanted]
    assert len(rows) == NUM_PROBLEMS * COPIES
    path = tmp_path_factory.mktemp("aime") / "aime-slice.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return dict(
        path=path,
        ground_truths=[
            next(r["reward_model"]["ground_truth"] for r in rows if r["extra_info"]["index"] == i) for i in wanted
        ],
    )


@pytest.fixture(scope="module")
def cli_report(tiny_model_path, aime_slice, tmp_path_factory):
    work = tmp_path_factory.mktemp("eval")
    out_file = work / "aime.json"
    code, out = rllib(
        "evaluate",
        tiny_model_path,
        "--data",
        aime_slice["path"],
        "--max-response-length",
        32,
        "--out",
        out_file,
        cwd=work,
    )
    assert code == 0, out[-4000:]
    return dict(out=out, report=json.loads(out_file.read_text()), out_file=out_file)


def test_model_directory_on_the_aime_slice_reports_the_paper_metrics(cli_report, aime_slice):
    report = cli_report["report"]
    metrics = report["metrics"]["math_dapo"]
    assert set(metrics) == {
        "avg@32",
        "pass@1",
        "pass@2",
        "pass@4",
        "pass@8",
        "pass@16",
        "pass@32",
        "maj@32",
        "response_length_mean",
        "truncation_ratio",
        "scoring_timeouts",
        "num_problems",
        "num_samples",
    }
    # 96 rows = 3 problems, each sampled 32 times (the file's copies), not 96 problems.
    assert (metrics["num_problems"], metrics["num_samples"]) == (NUM_PROBLEMS, NUM_PROBLEMS * COPIES)
    assert report["settings"] | {"model": None, "data": None} == {
        "model": None,
        "data": None,
        "num_samples": 32,
        "max_problems": None,
        "temperature": 1.0,
        "top_p": 0.7,
        "max_prompt_length": 512,
        "max_response_length": 32,
        "scorer": None,
        "score_timeout_s": None,
        "seed": None,
    }
    assert metrics["avg@32"] == pytest.approx(metrics["pass@1"])
    assert 0.0 <= metrics["avg@32"] <= metrics["pass@32"] <= 1.0
    assert 0 < metrics["response_length_mean"] <= 32
    assert 0.0 <= metrics["truncation_ratio"] <= 1.0
    problems = report["problems"]
    assert [p["ground_truth"] for p in problems] == aime_slice["ground_truths"]
    assert all(p["num_samples"] == COPIES and 0 <= p["num_correct"] <= COPIES for p in problems)
    assert metrics["avg@32"] == pytest.approx(sum(p["accuracy"] for p in problems) / NUM_PROBLEMS)
    assert metrics["maj@32"] == pytest.approx(sum(p["majority_correct"] for p in problems) / NUM_PROBLEMS)


def test_the_command_shows_progress_a_table_and_where_the_json_went(cli_report):
    out = cli_report["out"]
    assert "each problem appears 32 times" in out
    assert "evaluating: 100%" in out  # the progress bar of the episodes while sampling
    # Scoring happens inside the episodes, under the same bar.
    header = next(line for line in out.splitlines() if line.startswith("data source"))
    assert header.split()[2:5] == ["avg@32", "pass@1", "pass@2"]
    assert any(line.startswith("math_dapo ") for line in out.splitlines())
    assert f"results (every number, per problem too): {cli_report['out_file']}" in out


def test_unique_rows_with_n_samples_give_the_same_avg_at_n_as_repeated_rows(
    cli_report, aime_slice, tiny_model_path, tmp_path
):
    """ "32 copies of each problem" and "each unique problem sampled 32 times" are one definition."""
    unique = tmp_path / "unique.parquet"
    rows = pq.read_table(aime_slice["path"]).to_pylist()
    firsts = {}
    for row in rows:  # in the order the loader keeps them, so each problem keeps its seed
        firsts.setdefault(row["extra_info"]["index"], row)
    pq.write_table(pa.Table.from_pylist(list(firsts.values())), unique)
    report = evaluate(
        tiny_model_path, data=str(unique), num_samples=COPIES, max_response_length=32, out=tmp_path / "unique.json"
    )
    assert report["metrics"] == cli_report["report"]["metrics"]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "contains no rows"),
        (b'{"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"style": "rule"}}\n', "row 0 of"),
    ],
    ids=["empty file", "no ground truth"],
)
def test_bad_eval_files_are_clear_errors_before_any_engine_starts(tiny_model_path, tmp_path, content, message):
    data = tmp_path / "eval.jsonl"
    data.write_bytes(content)
    code, out = rllib("evaluate", tiny_model_path, "--data", data, cwd=tmp_path)
    assert code == 2, out[-3000:]
    assert message in out and "Traceback" not in out


def test_a_model_directory_needs_data(tiny_model_path, tmp_path):
    code, out = rllib("evaluate", tiny_model_path, cwd=tmp_path)
    assert code == 2
    assert f"--data is required to evaluate the model {tiny_model_path!r}" in out


@pytest.fixture(scope="module")
def arithmetic_file(tmp_path_factory):
    from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl

    path = tmp_path_factory.mktemp("arith") / "arithmetic-8.jsonl"
    write_jsonl(map(problem_to_row, generate_arithmetic_problems("test", 8)), path)
    return path


def test_math_verify_scorer_accepts_what_math_dapo_rejects_on_the_same_samples(
    tiny_model_path, arithmetic_file, tmp_path
):
    """Sampling is seeded per problem, so both runs see the same responses; only the scorer
    differs. The tiny model ends some answers with "Answer: 85." (wrong for the reference
    scorer, whose quirk keeps the period) or "The answer is 85.", which math-verify reads."""
    runs = {
        scorer: evaluate(
            tiny_model_path,
            data=str(arithmetic_file),
            num_samples=4,
            max_response_length=32,
            scorer=scorer,
            out=tmp_path / f"{scorer}.json",
        )
        for scorer in ("math_dapo", "math_verify")
    }
    assert runs["math_verify"]["settings"]["scorer"] == "math_verify"
    dapo, verify = (runs[s]["problems"] for s in ("math_dapo", "math_verify"))
    for d, v in zip(dapo, verify, strict=True):
        assert v["response_length_mean"] == d["response_length_mean"]  # the same samples
        assert v["num_correct"] >= d["num_correct"]
    assert runs["math_verify"]["metrics"]["arithmetic"]["avg@4"] > runs["math_dapo"]["metrics"]["arithmetic"]["avg@4"]


def test_a_scorer_that_hangs_is_cut_off_and_counted(tiny_model_path, arithmetic_file, tmp_path):
    report = evaluate(
        tiny_model_path,
        data=str(arithmetic_file),
        num_samples=2,
        max_problems=2,
        max_response_length=16,
        scorer=f"{naive_scorers.__name__}:always_hangs",
        score_timeout_s=0.5,
        out=tmp_path / "hang.json",
    )
    metrics = report["metrics"]["arithmetic"]
    assert metrics["scoring_timeouts"] == metrics["num_samples"] == 4
    assert metrics["avg@2"] == 0.0
    assert [p["scoring_timeouts"] for p in report["problems"]] == [2, 2]


def test_the_command_names_a_chosen_scorer_under_its_table(tiny_model_path, arithmetic_file, tmp_path):
    """The table's rows are data sources ("arithmetic"): a scorer of the user's, imported from the directory the
    command runs in, is named under it, not taken for the source's own."""
    args = ["--num-samples", "2", "--max-problems", "2", "--max-response-length", "16", "--out", tmp_path / "r.json"]
    scorer = "naive_scorers:process_id"
    code, out = rllib("evaluate", tiny_model_path, "--data", arithmetic_file, "--scorer", scorer, *args, cwd=SCORERS)
    assert code == 0, out[-4000:]
    assert f"scored by '{scorer}'; the table's rows are the problems' data sources (arithmetic)" in out


def test_format_table_aligns_columns_and_formats_numbers():
    table = format_table([["data source", "avg@32", "pass@1"], ["math_dapo", 0.5, None], ["x", 1, 2.0]], align="<>")
    assert table.splitlines() == ["data source  avg@32  pass@1", "math_dapo     0.500  -", "x                 1  2.000"]


@pytest.mark.parametrize(
    ("rows", "align", "message"),
    [
        ([["a"], ["b", "c"]], "", r"rows of \[1, 2\] cells"),
        ([["a"]], "<>", "at most 1 columns"),
        ([["a"]], "^", r"'\^'"),
    ],
)
def test_format_table_rejects_ragged_rows_and_bad_alignment(rows, align, message):
    with pytest.raises(ValueError, match=message):
        format_table(rows, align)
