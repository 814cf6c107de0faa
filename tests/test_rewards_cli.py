"""`local-grpo rewards list` and `rewards score` (local_grpo/cli/rewards.py)."""

import argparse
import json

import pytest

from local_grpo.cli import main
from local_grpo.cli import rewards as cli


@pytest.fixture
def completions_file(tmp_path):
    rows = [
        {"prompt": "What is 47 + 38?", "completion": "Answer: 85", "answer": "85"},
        {"prompt": "What is 47 + 38?", "completion": "47 + 38", "answer": "85"},
        {"prompt": "What is 2 + 2?", "completion": [{"role": "assistant", "content": "\\boxed{4}"}], "answer": "4"},
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"completion": "torn')
    return path


def test_register_cli_sets_func_for_each_sub_command():
    parser = argparse.ArgumentParser()
    cli.register_cli(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["rewards", "list"]).func is cli.list_command
    args = parser.parse_args(["rewards", "score", "--rewards", "format_soft", "--completions", "x.jsonl", "--json"])
    assert args.func is cli.score_command and args.json


def test_list_shows_every_builtin_with_params(capsys):
    assert main(["rewards", "list"]) == 0
    out = capsys.readouterr().out
    assert "correct_numeric" in out and "params: tolerance=1e-06" in out
    assert main(["rewards", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["rewards"]
    assert {"name", "summary", "params"} <= set(listed[0])


def test_score_json_is_one_object_with_scores_and_summary(completions_file, capsys):
    code = main(["rewards", "score", "--rewards", "format_soft:0.5,correct_numeric", "--completions", str(completions_file),
                     "--json"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("\n") == 1
    report = json.loads(out)
    assert [r["weight"] for r in report["rewards"]] == [0.5, 1.0]
    assert [row["scores"]["correct_numeric"] for row in report["completions"]] == [1.0, 0.0, 1.0]
    assert report["completions"][0]["total"] == 1.5
    numeric = report["summary"]["correct_numeric"]
    assert numeric["mean"] == pytest.approx(2 / 3) and numeric["fraction_none"] == 0.0 and numeric["faults"] == {}


def test_score_reports_faults_of_a_user_reward(tmp_path, completions_file, capsys):
    user = tmp_path / "r.py"
    user.write_text("def broken(completions, **kw):\n    raise KeyError('x')\n")
    assert main(["rewards", "score", "--rewards", f"{user}:broken:0", "--completions", str(completions_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["broken"]["fraction_none"] == 1.0
    assert report["summary"]["broken"]["faults"] == {"exception": 3}
    assert report["events"][0]["kind"] == "exception"


def test_score_table_output(completions_file, capsys):
    assert main(["rewards", "score", "--rewards", "correct_numeric", "--completions", str(completions_file)]) == 0
    out = capsys.readouterr().out
    assert "correct_numeric" in out and "mean 0.667" in out


@pytest.mark.parametrize("argv,fragment", [
    (["score", "--rewards", "nope", "--completions", "x"], "unknown reward 'nope'"),
    (["score", "--rewards", "format_soft", "--completions", "/nonexistent.jsonl"], "/nonexistent.jsonl"),
    (["score", "--rewards", "format_soft,,correct_numeric", "--completions", "x"], "--rewards: empty entry"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(argv, fragment, capsys, tmp_path):
    code = main(["rewards", *argv] if argv[0] != "rewards" else argv)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and fragment in captured.err


def test_bad_jsonl_line_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"completion": "a"}\nnot json\n{"completion": "b"}\n')
    assert main(["rewards", "score", "--rewards", "format_soft", "--completions", str(path)]) == 2
    assert f"{path}:2" in capsys.readouterr().err
