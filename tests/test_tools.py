"""Tool use (docs/tasks.md, "Tools"): the calculator tool, tools in their sandbox, the tool-calling chat
template, and a tiny model that calls a tool, through TRL's loop in training (role-tagged turns in
completions.jsonl, the tool's result masked out of the loss) and through eval's loop.

The tool-calling model is the tiny random qwen2 model (SmolLM2's tokenizer, TRL's qwen2_5 template) with a
generation config whose `sequence_bias` (transformers' SequenceBiasLogitsProcessor) makes its first turn
after a question the calculator call TOOL_CALL: a real model and real generation, TRL's and ours, that calls
the tool once and then writes whatever its random weights give.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, make_tiny_config
from local_grpo import tasks
from local_grpo.errors import UserError
from local_grpo.tasks.builtin.calculator import calculator
from local_grpo.tasks.tools import CHATML_TOOLS_TEMPLATE, SandboxedTool, ToolError, prepare_chat_template, sandboxed_tools

TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "80 - 57"}}\n</tool_call><|im_end|>'
TOOL_TURN = "\n<|im_start|>user\n<tool_response>\n23\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
AFTER_A_QUESTION = "?<|im_end|>\n<|im_start|>assistant\n"  # every word problem ends with "?"

TOOLS_FILE = '''
import os
import time

from local_grpo.tasks import Task, Verifier
from local_grpo.tasks.builtin.word_problems import word_problem_examples


def pid() -> str:
    """The process the tool runs in."""
    return str(os.getpid())


def boom(message: str) -> str:
    """Raise.

    Args:
        message: what to raise with.
    """
    raise RuntimeError(message)


def nap(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"


def peek(path: str) -> str:
    """Read a file.

    Args:
        path: the file.
    """
    with open(path) as fh:
        return fh.read()


task = Task(name="toolbox", system_prompt="Use the tools.", examples=word_problem_examples,
            parse_answer=str, rubric=None, verifier=Verifier.per_record("none", lambda r: None),
            tools=[pid, boom, nap, peek])
'''


# --- the calculator and the two tasks -------------------------------------------------------------

def test_calculator_evaluates_arithmetic_by_its_syntax_tree():
    assert calculator("812 - 357") == "455"
    assert calculator("(24 + 6) * 3") == "90"
    assert calculator("7 / 2") == "3.5" and calculator("9072 / 56") == "162"
    assert calculator("812 × 12") == "9744" and calculator("2 ^ 10") == "1024"
    assert calculator("1 / 0") == "error: division by zero"
    assert calculator("__import__('os').getcwd()").startswith("error: only numbers")
    assert calculator("2 ** 100000") == "error: exponent larger than 64"
    assert calculator("9" * 300).startswith("error: give an expression")
    assert calculator("80 -") == "error: not an arithmetic expression"


def test_calculator_asks_the_word_problems_with_a_tool():
    calc, words = tasks.get_task("calculator"), tasks.get_task("word_problems")
    assert {"calculator", "word_problems"} <= set(tasks.builtin_names())
    assert calc.tools == [calculator] and words.tools is None
    rows = calc.examples(200, 3, {})
    assert rows == words.examples(200, 3, {})  # the same problems: word_problems is the control
    assert all(row["question"].endswith("?") and row["answer"].lstrip("-").isdigit() for row in rows)
    assert all(calculator(row["expression"]) == row["answer"] for row in rows)  # the arithmetic each one asks for
    assert calc.rubric == words.rubric and calc.verifier is words.verifier
    assert calc.rubric.success_reward() == "correct_numeric"


# --- tools in their sandbox ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def toolbox(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toolbox")
    path = folder / "toolbox.py"
    path.write_text(TOOLS_FILE)
    return tasks.get_task(f"{path}:task")


def test_a_tool_runs_in_its_own_child_process_and_a_failure_is_an_error_and_an_event(toolbox):
    pid, boom, nap, peek = sandboxed_tools(toolbox)
    assert pid.__name__ == "pid" and pid.__doc__ == "The process the tool runs in."
    assert pid() != str(os.getpid())
    assert sandboxed_tools(toolbox)[0] is pid  # one child per tool and process
    with pytest.raises(ToolError, match=r"^tool boom: RuntimeError: no luck$"):
        boom(message="no luck")
    with pytest.raises(ToolError, match="unexpected keyword argument 'text'"):
        boom(text="the model named the argument wrongly")
    with pytest.raises(ToolError, match="reward sandbox: reading /etc/hostname is not allowed"):
        peek(path="/etc/hostname")
    assert nap(seconds=0) == "awake"
    assert [(e["tool"], e["kind"]) for e in boom.drain_events()] == [("boom", "exception"), ("boom", "exception")]
    assert boom.drain_events() == [] and [e["kind"] for e in peek.drain_events()] == ["exception"]


def test_a_tool_that_overruns_its_time_limit_is_killed(toolbox):
    nap = SandboxedTool(toolbox.tools[2], timeout_s=1.0)
    assert nap.function(seconds=0) == "awake"
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"tool nap: tool nap took longer than 1s \(process killed\)"):
        nap.function(seconds=30)
    assert time.monotonic() - started < 10
    assert [e["kind"] for e in nap.drain_events()] == ["timeout"]
    assert nap.function(seconds=0) == "awake"  # a fresh child takes the next call


def test_a_tool_must_be_a_documented_top_level_function(toolbox):
    undocumented = tasks.Task(name="bad", system_prompt="", examples=toolbox.examples, parse_answer=str,
                              rubric=None, verifier=toolbox.verifier, tools=[os.getcwd])
    with pytest.raises(UserError, match=r"^task 'bad': tools\[0\]: .* is not a top-level function of a .py file"):
        sandboxed_tools(undocumented)

    def nested(x: int) -> int:
        return x

    with pytest.raises(UserError, match=r"^task 'bad': tools\[0\]: .*not a top-level function"):
        sandboxed_tools(tasks.Task(name="bad", system_prompt="", examples=toolbox.examples, parse_answer=str,
                                   rubric=None, verifier=toolbox.verifier, tools=[nested]))
    twice = tasks.Task(name="bad", system_prompt="", examples=toolbox.examples, parse_answer=str, rubric=None,
                       verifier=toolbox.verifier, tools=[toolbox.tools[0], toolbox.tools[0]])
    with pytest.raises(UserError, match="two tools are named 'pid'"):
        sandboxed_tools(twice)


# --- the chat template ----------------------------------------------------------------------------

def tool_task_config(model_dir: str, output_dir: str = "unused", task: str = "calculator"):
    from local_grpo.config import validate

    config = make_tiny_config(model_dir, output_dir, steps=1, max_completion_length=64)
    config.data.task, config.model.max_seq_length = task, 512
    return validate(tasks.fill_defaults(config))


def test_the_embedded_models_chatml_template_gives_way_to_the_shipped_tool_template(tiny_architecture):
    import trl
    from transformers import AutoTokenizer
    from trl.chat_template_utils import parse_response, supports_tool_calling

    with open(os.path.join(os.path.dirname(trl.__file__), "chat_templates", "qwen2_5.jinja"), encoding="utf-8") as fh:
        assert open(CHATML_TOOLS_TEMPLATE, encoding="utf-8").read() == fh.read()  # so TRL parses its tool calls
    folder = tiny_architecture("smollm2")  # SmolLM2's own ChatML template, without tools
    own = AutoTokenizer.from_pretrained(folder)
    assert not supports_tool_calling(own)
    prepare_chat_template(own, tool_task_config(folder, task="word_problems"))
    assert not supports_tool_calling(own)  # a task without tools keeps the model's template

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prepare_chat_template(tokenizer, tool_task_config(folder))
    assert tokenizer.chat_template == open(CHATML_TOOLS_TEMPLATE, encoding="utf-8").read()
    assert supports_tool_calling(tokenizer) and tokenizer.response_template is not None
    prompt = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "What is 80 - 57?"}]
    assert tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == \
        own.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)  # plain turns render alike
    call = {"name": "calculator", "arguments": {"expression": "80 - 57"}}
    rendered = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": "",
                                                        "tool_calls": [{"type": "function", "function": call}]}],
                                             tokenize=False)
    assert rendered.endswith(TOOL_CALL + "\n")
    prefix = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=False)
    parsed = parse_response(tokenizer, tokenizer(TOOL_CALL, add_special_tokens=False)["input_ids"], prefix=prefix)
    assert parsed["tool_calls"] == [{"type": "function", "function": call}]


def test_a_tool_task_on_a_model_whose_template_cannot_call_tools_is_one_line_and_exit_2(tiny_architecture, tmp_path):
    folder = tiny_architecture("phi3")  # Phi-3's template drops tool turns
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": REPO}
    result = subprocess.run([sys.executable, "-m", "local_grpo.cli", "train", "--model", folder, "--task", "calculator",
                             "--backend", "hf", "--max-steps", "1", "--output", str(tmp_path / "run")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert lines[-1].startswith("local-grpo: error: model.chat_template: the chat template of ") and \
        "cannot render tool calls" in lines[-1] and "--chat-template" in lines[-1], result.stderr
    assert not (tmp_path / "run").exists()


# --- a model that calls the tool: training and eval -----------------------------------------------

@pytest.fixture(scope="module")
def tool_calling_model(tiny_architecture, tmp_path_factory) -> str:
    """The tiny qwen2 model whose first turn after a question is TOOL_CALL (module docstring)."""
    from transformers import AutoTokenizer, GenerationConfig

    folder = str(tmp_path_factory.mktemp("tool-caller"))
    shutil.copytree(tiny_architecture("qwen2"), folder, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    context = tokenizer(AFTER_A_QUESTION, add_special_tokens=False)["input_ids"]
    call = tokenizer(TOOL_CALL, add_special_tokens=False)["input_ids"]
    generation = GenerationConfig.from_pretrained(folder)
    generation.sequence_bias = [[context + call[:n], 100.0] for n in range(1, len(call) + 1)]
    generation.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tool_run(tool_calling_model, tmp_path_factory, one_torch_thread) -> str:
    """One GRPO step of the calculator task on the tool-calling model, through train()."""
    from local_grpo import train

    config = tool_task_config(tool_calling_model, str(tmp_path_factory.mktemp("tool-run") / "run"))
    train.train(config, progress=False)
    return config.output_dir


def test_a_tool_task_trains_through_trls_tool_loop_with_role_tagged_turns(tool_run):
    from local_grpo import rundir

    run = rundir.RunDir(tool_run)
    records = run.completions()
    assert len(records) == 8
    for record in records:
        turns = record["turns"]
        assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"][: len(turns)] and len(turns) >= 2
        assert turns[0]["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "80 - 57"}}]
        assert turns[1] == {"role": "tool", "name": "calculator", "content": "23"}
        assert record["completion"] == "".join(t["content"] for t in turns if t["role"] == "assistant")
    metrics = run.metrics()[-1]
    assert metrics["tools/call_frequency"] == 1.0 and metrics["tools/failure_frequency"] == 0.0
    assert not [e for e in run.events() if e["type"] == rundir.TOOL_FAULT]
    with open(os.path.join(tool_run, "adapter", "tokenizer_config.json"), encoding="utf-8") as fh:
        assert "<tool_call>" in json.dumps(json.load(fh))  # eval --run reads the tool template from the adapter


def test_eval_runs_the_tool_loop_and_its_records_show_the_turns(tool_run):
    from local_grpo import config as config_module
    from local_grpo import evaluate, rundir

    run = rundir.RunDir(tool_run)
    config = config_module.load(run.file(rundir.CONFIG))
    from transformers import AutoTokenizer

    tool_turn = len(AutoTokenizer.from_pretrained(run.adapter_dir)(TOOL_TURN, add_special_tokens=False)["input_ids"])
    settings = evaluate.EvalSettings(n=2, samples=2, k=1, max_new_tokens=64)
    result = evaluate.run_eval(config, run.adapter_dir, settings, progress=False, base=run.base_model())
    assert result["metrics"]["tool_calls"] == 1.0
    for record in result["records"]:
        for completion in [record["greedy"], *record["samples"]]:
            turns = completion["turns"]
            assert turns[0]["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "80 - 57"}}]
            assert turns[1] == {"role": "tool", "name": "calculator", "content": "23"}
            assert completion["completion"] == "".join(t["content"] for t in turns if t["role"] == "assistant")
            assert completion["tokens"] <= 64 - tool_turn  # the model's own tokens, the tool's not counted


def test_the_tool_result_is_masked_out_of_the_loss(tool_calling_model, tmp_path, one_torch_thread):
    """TRL's batch for the loss, read at our `_compute_loss` hook: the tool turn's tokens have tool_mask 0,
    the model's own (the call, and its turn after the result) 1."""
    from datasets import Dataset

    from local_grpo import backends, data
    from local_grpo.train import trainer
    from local_grpo.train.run import reward_recorder

    config = tool_task_config(tool_calling_model, str(tmp_path / "run"))
    loaded = backends.load(config)
    recorder = reward_recorder(config)
    batches = []

    class ReadsTheLossInputs(trainer.trainer_class(loaded.trainer_class)):
        def _compute_loss(self, model, inputs):
            batches.append({key: inputs[key].clone() for key in ("completion_ids", "completion_mask", "tool_mask")})
            return super()._compute_loss(model, inputs)

    train_rows, _ = data.load_examples(config)
    ReadsTheLossInputs(model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=recorder.wrapped(),
                       args=trainer.grpo_args(config, str(tmp_path / "checkpoints"), False, "hf"),
                       train_dataset=Dataset.from_list(train_rows), config=config, tools=recorder.tools).train()
    decode = loaded.tokenizer.decode
    rows = 0
    for batch in batches:
        for ids, completion, tool in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"]):
            ids, mask = ids[completion == 1].tolist(), tool[completion == 1].tolist()
            start = mask.index(0)
            end = start + mask[start:].count(0)
            assert mask == [1] * start + [0] * (end - start) + [1] * (len(mask) - end)  # one masked span
            assert decode(ids[:start]) == TOOL_CALL  # the model's call: trained on
            assert decode(ids[start:end]) == TOOL_TURN  # the tool's result and the next turn's header: masked
            assert len(mask) > end  # the model's turn after the result: trained on
            rows += 1
    assert rows == 8


def test_the_watch_tab_shows_each_tool_call_and_result():
    from apps.runs import completion_text, completions_table

    turns = [{"role": "assistant", "content": "", "tool_calls": [{"name": "calculator",
                                                                  "arguments": {"expression": "80 - 57"}}]},
             {"role": "tool", "name": "calculator", "content": "23"},
             {"role": "assistant", "content": "Answer: 23"}]
    record = {"step": 1, "prompt": "Sam has 80 books and gives away 57. How many are left?", "answer": "23",
              "completion": "Answer: 23", "rewards": {"correct_numeric": 1.0}, "total": 1.0, "success": 1,
              "turns": turns}
    shown = '[tool call] calculator(expression="80 - 57")\n[calculator] 23\nAnswer: 23'
    assert completion_text(record) == shown
    assert completions_table([record])["completion"].tolist() == [shown]
    assert completion_text({**record, "turns": None}) == "Answer: 23"  # a single-turn task: its text


def test_model_chat_template_is_a_file_and_a_flag(tmp_path):
    from local_grpo.config import override_fields

    assert override_fields()["chat-template"][:2] == ("model", "chat_template")
    config = tool_task_config(REPO, task="word_problems")
    config.model.chat_template = str(tmp_path / "missing.jinja")
    with pytest.raises(UserError, match=r"^model.chat_template: file not found: .*missing.jinja"):
        prepare_chat_template(object(), config)


def test_the_studios_task_dropdowns_offer_the_built_ins_and_take_a_task_file(tmp_path):
    from apps.studio import build_studio

    ui = build_studio(str(tmp_path / "runs"))
    for dropdown in (ui.train.task, ui.design.check.task):
        offered = [choice[0] if isinstance(choice, tuple) else choice for choice in dropdown.choices]
        assert offered == tasks.builtin_names() and dropdown.allow_custom_value
