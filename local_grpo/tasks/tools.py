"""Tool use: the tools a task hands the model, each run sandboxed, and a chat template that can call them.

    tools = sandboxed_tools(task)                 # what TRL's GRPOTrainer(tools=...) and the eval loop call
    prepare_chat_template(tokenizer, config)      # model.chat_template; for a tool task, one that can call tools

A tool is a plain Python function with type hints and a Google-style docstring (transformers builds the
JSON schema the model reads from them), top-level in a module or in the task's file. In training, TRL's
tool loop parses each tool call, runs the tool, appends its result as a `tool` turn and generates again;
the result's tokens are masked out of the loss. generation.py runs the same loop for eval, p_ref and the
periodic held-out eval. Each call goes to the tool's own child process (rewards.worker.ChildProcess) under
the reward sandbox's file guard (rewards/sandbox.py; not a security boundary), with the time and memory
limits of a user reward file: a tool that raises, overruns or crashes raises ToolError here (the model
reads the error as the tool's result) and is kept for the run's events.jsonl (a `tool_fault` event).
No torch here; trl and transformers are imported when a template or a schema is checked.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading

from ..config import Config
from ..errors import UserError
from .registry import task_for
from .task import Task

TOOL_TIMEOUT_S = 5.0  # as a user reward file's call (rewards.userfile.SAFETY_PARAMS)
TOOL_MEMORY_MB = 2048
# The shipped tool-calling template: TRL's qwen2_5.jinja byte for byte, so TRL recognises it and reads its
# tool calls (trl.chat_template_utils.add_response_schema). Its default system line names Qwen: tool tasks
# always send a system prompt.
CHATML_TOOLS_TEMPLATE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "chat_templates",
                                     "chatml_tools.jinja")
_SANDBOXES: dict = {}  # tool function -> its SandboxedTool (one child process per tool and process)
_LOCK = threading.Lock()


class ToolError(Exception):
    """A tool call that failed in the child (raised, timed out, crashed); TRL and the eval loop give the model
    `{'error': message}` as the tool's result."""


class SandboxedTool:
    """One tool run in its own child process; `function` is what the model calls (same name, signature, docstring)."""

    def __init__(self, function, timeout_s: float = TOOL_TIMEOUT_S, memory_mb: int = TOOL_MEMORY_MB):
        from rewards.worker import ChildProcess

        self.name = function.__name__
        self.source = tool_source(function)
        self.timeout_s = timeout_s
        self.child = ChildProcess(memory_mb, f"tool {self.name}")
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self.function = functools.wraps(function)(lambda **arguments: self.call(arguments))
        self.function.drain_events = self.drain_events

    def call(self, arguments: dict) -> str:
        """The tool's result as text; ToolError (and a tool_fault event) when it fails."""
        from rewards.worker import ChildDied, ChildTimeout

        try:
            status, value = self.child.request(("call_tool", self.source, self.name, dict(arguments)), self.timeout_s)
        except ChildTimeout as error:
            kind, value = "timeout", str(error)
        except ChildDied as error:
            kind, value = "crash", str(error)
        else:
            if status == "ok":
                return value
            kind = "exception"
        message = " ".join(f"tool {self.name}: {value}".split())[:300]
        with self._lock:
            self._events.append({"tool": self.name, "kind": kind, "message": message})
        raise ToolError(message)

    def drain_events(self) -> list[dict]:
        """The failed calls since the last call: {"tool", "kind" (exception, timeout, crash), "message"} each."""
        with self._lock:
            events, self._events = self._events, []
        return events


def tool_source(function) -> tuple[str, str, str]:
    """Where the child finds a tool: ("module", name, folder) for a function of a package module (imported
    from `folder`), else ("file", path, folder) for one of a top-level file (a task file, executed there)."""
    module_name = function.__module__
    path = os.path.abspath(inspect.getsourcefile(function))
    module = sys.modules.get(module_name)
    package = getattr(getattr(module, "__spec__", None), "parent", "")
    if package and module_name != "__main__":
        folder = path
        for _ in module_name.split("."):
            folder = os.path.dirname(folder)
        return ("module", module_name, folder)
    return ("file", path, os.path.dirname(path))


def checked_tool(function, where: str):
    """The function, when it can be a tool: a top-level function of a .py file whose schema transformers can build."""
    from transformers.utils import get_json_schema

    if not inspect.isfunction(function) or function.__qualname__ != function.__name__ \
            or inspect.getsourcefile(function) is None:
        raise UserError(f"{where}: {function!r:.80} is not a top-level function of a .py file (a tool runs in a "
                        "child process, which finds it by name)")
    try:
        get_json_schema(function)
    except Exception as error:  # transformers' DocstringParsingException, TypeHintParsingException
        raise UserError(f"{where}: {function.__name__}: {' '.join(str(error).split())[:200]} (a tool needs type "
                        "hints and a docstring with an Args: line per argument)") from None
    return function


def sandboxed_tools(task: Task) -> list | None:
    """The task's tools as the model calls them, each in its own child process; None for a task without tools."""
    if not task.tools:
        return None
    functions = [checked_tool(fn, f"task {task.name!r}: tools[{i}]") for i, fn in enumerate(task.tools)]
    names = [fn.__name__ for fn in functions]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"task {task.name!r}: tools: two tools are named {twice[0]!r} (the model calls a tool by name)")
    with _LOCK:
        for fn in functions:
            if fn not in _SANDBOXES:
                _SANDBOXES[fn] = SandboxedTool(fn)
        return [_SANDBOXES[fn].function for fn in functions]


def tools_for(config: Config) -> list | None:
    """The config's task's tools, sandboxed (sandboxed_tools); None when the task has none."""
    return sandboxed_tools(task_for(config))


def max_tool_rounds(config: Config) -> int | None:
    """Tool-calling rounds per completion: grpo.trl's max_tool_calling_iterations (TRL's field), None = until the
    model stops calling tools or the completion is max_completion_length tokens long."""
    value = (config.grpo.trl or {}).get("max_tool_calling_iterations")
    return int(value) if value is not None else None


# --- the chat template -------------------------------------------------------------------------

def read_chat_template(path: str) -> str:
    """The text of a Jinja chat-template file; UserError naming model.chat_template otherwise."""
    if not os.path.isfile(path):
        raise UserError(f"model.chat_template: file not found: {path} (give a Jinja chat-template file, e.g. "
                        f"{CHATML_TOOLS_TEMPLATE})")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def prepare_chat_template(tokenizer, config: Config) -> None:
    """Give the tokenizer model.chat_template when set, and for a tool task a template that can call tools.

    A tool task on a model whose own template cannot render tool calls, but renders plain conversations
    exactly as the shipped ChatML tool template does (the embedded SmolLM2), gets the shipped one. Any other
    template that cannot call tools, or whose tool calls TRL cannot parse, is one UserError line. TRL's
    parser for the template is set on the tokenizer here (`add_response_schema`), so eval reads tool calls
    as training does.
    """
    if config.model.chat_template:
        tokenizer.chat_template = read_chat_template(config.model.chat_template)
    task = task_for(config)
    if not task.tools:
        return
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if not supports_tool_calling(tokenizer) and not config.model.chat_template:
        shipped = read_chat_template(CHATML_TOOLS_TEMPLATE)
        if renders_alike(tokenizer, shipped):
            tokenizer.chat_template = shipped
    if not supports_tool_calling(tokenizer):
        raise UserError(f"model.chat_template: the chat template of {config.model.name} cannot render tool calls, "
                        f"which task {task.name!r} needs; give one that can with --chat-template FILE (for a ChatML "
                        f"model: {CHATML_TOOLS_TEMPLATE}), or use a tool-calling model such as Qwen2.5-Instruct")
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            raise UserError("model.chat_template: TRL cannot read the tool calls this chat template writes (it parses "
                            "the formats of the templates it ships: Qwen2.5/3, Llama 3.1/3.2, ...); use one of them, "
                            f"e.g. {CHATML_TOOLS_TEMPLATE} for a ChatML model") from None


def renders_alike(tokenizer, template: str) -> bool:
    """True when `template` renders a plain conversation (system, user, assistant, user) exactly as the
    tokenizer's own template does: swapping it in changes nothing but adding tool calls."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
    try:
        own = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        other = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                              chat_template=template)
    except Exception:  # a template that rejects this conversation (e.g. no system role)
        return False
    return own == other
