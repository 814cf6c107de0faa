"""The studio's wiring, checked on the real Blocks (apps.studio.build_studio on a runs folder with one run).

Each tab's record (DesignTab, TrainTab, WatchTab, ExportTab) holds exactly the components its events use,
and every handler with several outputs returns {component: value} for exactly the outputs it is wired to,
so a renamed field or a forgotten output fails here rather than in a browser.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import gradio as gr
import pytest
from gradio.blocks import Block

from apps.designer import TEMPLATE
from apps.studio import StudioUI, build_studio
from apps.tabs.check_panel import CheckPanel
from apps.tabs.design import DesignTab
from apps.tabs.export import ExportTab
from apps.tabs.train import TrainTab
from apps.tabs.watch import WatchTab
from test_app_units import SAMPLES, write_run

SAMPLES_TEXT = "\n".join(json.dumps(sample) for sample in SAMPLES)
PROMPT = "What is 1 + 0?"  # a prompt of write_run's completions
# api_name: the handler's inputs in their wired order, on real files (the run "r", the designer's template).
CALLS = {
    "score_rewards": (TEMPLATE, SAMPLES_TEXT, 5, True),
    "compare_rewards": (TEMPLATE, SAMPLES_TEXT, "correct_numeric", 5, True),
    "save_rewards": (TEMPLATE, "mine"),
    "train_with_rewards": ("mine",),  # the file save_rewards wrote
    "check_settings_from_train": ("embedded", "cpu", "countdown", "", "countdown: 1"),
    "list_runs": (),
    "load_run": ("r", "latest", 2, None),
    "load_run_view": ("r", "faults", 1, PROMPT),
    "refresh_run": ("r", "best", 3, PROMPT, ""),
    "smooth_curves": ("r", 3),
    "prompt_history": ("r", PROMPT),
}
# Events that start a process (a model check, a training run): tests/test_app_live.py calls them through
# gradio_client and asserts every output it gets back.
LIVE = {"check_rewards", "start_training"}


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> StudioUI:
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "r")
    return build_studio(str(root))


def held_components(record, prefix: str) -> dict[str, Block]:
    """Every component a record holds, by field path ('design.check.verdict', 'watch.curves[kl]')."""
    held = {}
    for field in dataclasses.fields(record):
        value, name = getattr(record, field.name), f"{prefix}.{field.name}"
        if dataclasses.is_dataclass(value):
            held.update(held_components(value, name))
        elif isinstance(value, dict):
            held.update({f"{name}[{key}]": item for key, item in value.items()})
        elif isinstance(value, list):
            held.update({f"{name}[{i}]": item for i, item in enumerate(value)})
        elif isinstance(value, Block) and not isinstance(value, gr.Blocks):
            held[name] = value
    return held


def wired_ids(app: gr.Blocks) -> dict[int, str]:
    """Component id -> the api_name of an event that triggers on it, reads it or writes it."""
    wired = {}
    for fn in app.fns.values():
        for block in (*fn.inputs, *fn.outputs):
            wired[block._id] = fn.api_name
        for block_id, _event in fn.targets:
            wired[block_id] = fn.api_name
    return wired


def test_tab_records_hold_exactly_the_components_the_events_use(ui):
    held = held_components(ui, "ui")
    wired = wired_ids(ui.app)
    never_wired = [name for name, component in held.items() if component._id not in wired]
    assert not never_wired, f"record fields no event uses: {never_wired}"
    held_ids = {component._id for component in held.values()}
    outside = sorted(f"{api}: {type(ui.app.blocks[i]).__name__} {i}" for i, api in wired.items() if i not in held_ids)
    assert not outside, f"events using components outside every tab record: {outside}"


def conforms(value, hint) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(conforms(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(conforms(item, args[1]) for item in value.values())
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    return isinstance(value, hint)


@pytest.mark.parametrize("record_type", [StudioUI, DesignTab, CheckPanel, TrainTab, WatchTab, ExportTab])
def test_record_fields_hold_the_components_their_types_say(ui, record_type):
    records = [ui, ui.design, ui.design.check, ui.train, ui.watch, ui.export]
    record = next(r for r in records if type(r) is record_type)
    hints = typing.get_type_hints(record_type)
    wrong = [f"{name}: {type(getattr(record, name)).__name__} is not {hint}" for name, hint in hints.items()
             if not conforms(getattr(record, name), hint)]
    assert not wrong


def test_handlers_with_several_outputs_return_exactly_those_outputs_by_component(ui):
    fns = {fn.api_name: fn for fn in ui.app.fns.values()}
    several = {name for name, fn in fns.items() if len(fn.outputs) > 1}
    assert several == set(CALLS) | LIVE, "a new event with several outputs needs a row in CALLS (or a live test)"
    for name, args in CALLS.items():
        fn = fns[name]
        assert len(args) == len(fn.inputs), name
        result = fn.fn(*args)
        assert isinstance(result, dict) and all(isinstance(key, Block) for key in result), name
        returned, outputs = {key._id for key in result}, {block._id for block in fn.outputs}
        assert returned == outputs, (name, returned - outputs, outputs - returned)


def test_the_poll_sends_nothing_when_no_file_changed_and_keeps_edited_weights(ui):
    refresh = next(fn for fn in ui.app.fns.values() if fn.api_name == "refresh_run").fn
    first = refresh("r", "latest", 2, None, "")
    watch = ui.watch
    assert "correct_numeric" in first[watch.weights]
    assert refresh("r", "latest", 2, None, first[watch.signature]) == gr.skip()
    other_view = refresh("r", "best", 2, None, first[watch.signature])  # same run, another view
    assert other_view[watch.weights] == gr.skip() and other_view[watch.signature] != first[watch.signature]
    assert refresh("", "latest", 2, None, "") == gr.skip() and refresh("../x", "latest", 2, None, "") == gr.skip()


def test_train_with_rewards_fills_the_train_tab_and_selects_it(ui):
    fns = {fn.api_name: fn.fn for fn in ui.app.fns.values()}
    fns["save_rewards"](TEMPLATE, "picked")
    result = fns["train_with_rewards"]("picked")
    assert result[ui.train.rewards].endswith("picked.py:matches_gold: 1")
    assert result[ui.tabs].selected == "train"
    copied = fns["check_settings_from_train"]("embedded", "cpu", "countdown", "", "countdown: 1")
    check = ui.design.check
    assert (copied[check.task], copied[check.rewards]) == ("countdown", "countdown: 1")
