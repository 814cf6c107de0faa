"""The dataset task: the user's own file (or hub dataset) of questions and gold answers, `data.dataset`.

Chosen whenever data.dataset is set. Columns and the gold's format come from the data section
(prompt_column, answer_column, answer_format). The audit judges with math-verify on the tasks' own parser.
"""

from __future__ import annotations

from ...config import DataConfig
from ..answers import ANSWER_LINE_PROMPT, ANSWER_LINE_RUBRIC, stated_answer
from ..task import Source, Task
from ..verifiers import MATH_VERIFY


def dataset_source(d: DataConfig) -> Source:
    """data.dataset, read with the data section's columns and answer format."""
    return Source(path=d.dataset, question_column=d.prompt_column, answer_column=d.answer_column,
                  answer_format=d.answer_format, field="--dataset")


task = Task(
    name="dataset",
    description="your own .jsonl/.csv/.parquet file or hub dataset (data.dataset)",
    system_prompt=ANSWER_LINE_PROMPT,
    source=dataset_source,
    parse_answer=stated_answer,
    rubric=ANSWER_LINE_RUBRIC,
    verifier=MATH_VERIFY,
)
