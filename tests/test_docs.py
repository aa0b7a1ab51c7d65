"""The docs are tests: every fenced block of README.md and docs/*.md runs here, so an example that stops working
fails CI.

A block's fence says how it runs (the first word is the language, as GitHub reads it):

* ```` ```python ```` / ```` ```bash ````: runs in the default suite;
* ```` ```bash slow ````: runs with ``pytest -m slow`` (``tox -e slow``): a model fit, a long evaluation;
* ```` ```bash skip: REASON ````: never runs here, for the reason given (a GPU, a server outside this machine,
  an interactive terminal); the reason shows in pytest's summary;
* ```` ```toml ````: parsed (a pipeline config, one with ``[target]``, is validated too); a block without a
  language is text (a file tree, a log line) and is not collected.

The blocks of one document run in order, in one working directory of their own (the repository's files linked
in, ``generated_envs`` copied) and, for python, in one namespace: a later block may use what an earlier one
made, as a reader following the page would. ``python -m tests.test_docs`` prints every block with its status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "bash", "toml")
COPIED = {"generated_envs"}  # blocks may write there (trace synthesize --out generated_envs)
LEFT_OUT = {".git", ".venv", ".ci-venv", ".tox", "runs"}
BLOCK_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    status: str  # run | slow | skip | text
    reason: str
    source: str

    @property
    def id(self) -> str:
        doc = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{doc}:{self.line}"


def parse_fence(info: str) -> tuple[str, str, str]:
    """(language, status, reason) of a fence's info string; an unknown marker is an error, not a silent run."""
    lang, _, marker = info.strip().partition(" ")
    marker = marker.strip()
    if lang not in RUNNABLE:
        return lang, "text", ""
    if "`" in marker:  # CommonMark: a backtick in the info string makes the line no fence at all
        raise ValueError(f"a backtick in the doc-test marker {marker!r} breaks the fence")
    if not marker:
        return lang, "run", ""
    if marker == "slow":
        return lang, "slow", ""
    if marker.startswith("skip:") and marker[5:].strip():
        return lang, "skip", marker[5:].strip()
    raise ValueError(f"unknown doc-test marker {marker!r} (use: slow, or skip: REASON)")


def collect(docs: list[Path] = DOCS) -> list[Block]:
    """Every fenced block of ``docs``, in reading order (CommonMark's own parser: markdown-it-py)."""
    md = MarkdownIt("commonmark")
    blocks = []
    for doc in docs:
        for token in md.parse(doc.read_text(encoding="utf-8")):
            if token.type != "fence" or token.map is None:
                continue
            line = token.map[0] + 1
            try:
                lang, status, reason = parse_fence(token.info)
            except ValueError as exc:
                raise ValueError(f"{doc}:{line}: {exc}") from exc
            blocks.append(Block(doc, line, lang, status, reason, token.content))
    return blocks


BLOCKS = [b for b in collect() if b.status != "text"]


def _param(block: Block):
    marks = []
    if block.status == "slow":
        marks.append(pytest.mark.slow)
    if block.status == "skip":
        marks.append(pytest.mark.skip(reason=f"{block.id}: {block.reason}"))
    return pytest.param(block, id=block.id, marks=marks)


class Reader:
    """What one document's blocks share: a working directory and a python namespace."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.namespace: dict = {"__name__": "__main__"}
        for entry in ROOT.iterdir():
            if entry.name in LEFT_OUT:
                continue
            if entry.name in COPIED:
                shutil.copytree(entry, directory / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (directory / entry.name).symlink_to(entry)


READERS: dict[Path, Reader] = {}


@pytest.fixture
def reader(block: Block, tmp_path_factory) -> Reader:
    if block.doc not in READERS:
        READERS[block.doc] = Reader(tmp_path_factory.mktemp(block.doc.stem))
    return READERS[block.doc]


def run_block(block: Block, reader: Reader) -> None:
    if block.lang == "toml":
        config = tomllib.loads(block.source)  # a TOMLDecodeError names the line
        if "target" in config:  # a `trace run` config: the pipeline validates it as it would a file
            from trace_train.pipeline.config import config_from_dict

            config_from_dict(config, source=block.id)
        return
    if block.lang == "python":
        cwd = os.getcwd()
        os.chdir(reader.directory)
        sys.path.insert(0, str(reader.directory))
        try:
            exec(compile(block.source, block.id, "exec"), reader.namespace)
        finally:
            sys.path.remove(str(reader.directory))
            os.chdir(cwd)
        return
    done = subprocess.run(
        ["bash", "-e", "-u", "-o", "pipefail", "-c", block.source],
        cwd=reader.directory,
        stdin=subprocess.DEVNULL,  # an interactive command sees the end of its input
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(reader.directory), "COLUMNS": "120"},
    )
    if done.returncode != 0:
        pytest.fail(
            f"{block.id}: exit status {done.returncode}\n--- block\n{block.source}--- stdout (tail)\n"
            f"{done.stdout[-3000:]}\n--- stderr (tail)\n{done.stderr[-3000:]}",
            pytrace=False,
        )


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_doc_block(block: Block, reader: Reader) -> None:
    run_block(block, reader)


def test_markers_are_parsed_and_typos_refused():
    assert parse_fence("bash") == ("bash", "run", "")
    assert parse_fence("python slow") == ("python", "slow", "")
    assert parse_fence("bash skip: needs a GPU") == ("bash", "skip", "needs a GPU")
    assert parse_fence("") == ("", "text", "")
    assert parse_fence("text anything") == ("text", "text", "")
    for bad in ("bash slw", "bash skip:", "python skip needs a GPU"):
        with pytest.raises(ValueError, match="unknown doc-test marker"):
            parse_fence(bad)


def test_a_broken_block_fails(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "# Page\n\n```python\nvalue = 1\n```\n\n```python\nassert value == 2\n```\n\n```bash\nfalse\n```\n"
    )
    first, second, third = collect([doc])
    reader = Reader(tmp_path / "work")
    run_block(first, reader)  # the namespace is the page's: the second block sees `value`
    with pytest.raises(AssertionError):
        run_block(second, reader)
    with pytest.raises(pytest.fail.Exception, match="exit status 1"):
        run_block(third, reader)


def test_every_page_is_collected_and_no_fence_swallows_the_page():
    # a closing fence with text after it is no closing fence: the block then runs to the next fence
    for block in collect():
        assert "\n## " not in block.source, (
            f"{block.id}: the block swallows a heading (a broken closing fence?)"
        )
    assert {b.doc for b in BLOCKS} >= {ROOT / "README.md", ROOT / "docs" / "training.md"}


if __name__ == "__main__":  # the list of blocks and their status
    for block in collect():
        if block.status != "text":
            print(f"{block.id:32} {block.lang:7} {block.status:5} {block.reason}")
