"""The CLI loads study documents within the service's limits: alias bombs, deep nesting and
huge files are refused quickly, in little memory, with one line naming the limit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import typer
import yaml
from helpers import REPO

from service import safe_yaml
from service.cli import load_document
from service.studies import document as study_doc
from service.studies.limits import MAX_BODY_BYTES, MAX_DEPTH, MAX_YAML_ALIASES

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
)


def nested(levels: int) -> str:
    """A mapping whose deepest value sits `levels` below the root."""
    return "name: x\nspace: " + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "\n"


def cli(path: Path | str, stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """`paretune study create -f path`, and the process's peak resident memory in bytes."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec
    probe = ("import re, sys\nfrom service.cli import main\ntry:\n    main()\nfinally:\n"
             "    hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
             "    print('maxrss', int(hwm) * 1024, file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe, "study", "create", "-f", str(path), "--token", "t",
                          "--server", "http://127.0.0.1:9"], input=stdin, capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("maxrss"), out.stderr
    out.stderr = "\n".join(lines[:-1])
    return out, int(lines[-1].split()[1])


def refused_in_process(path: Path) -> tuple[float, int]:
    """load_document refuses `path`: seconds taken, and peak bytes allocated (measured in a
    second run: tracing allocations slows Python down several times)."""
    started = time.perf_counter()
    with pytest.raises(typer.Exit):
        load_document(path)
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    with pytest.raises(typer.Exit):
        load_document(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, peak


def test_billion_laughs_is_refused_fast_and_small(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 1000 and BILLION_LAUGHS.count("*") == 72  # under the alias count limit
    elapsed, peak = refused_in_process(bomb)
    assert elapsed < 5 and peak < 5_000_000, (elapsed, peak)  # the peak shows it; the time, no hang
    out, rss = cli(bomb)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 0 and f"over {MAX_BODY_BYTES:,} bytes" in out.stderr, out.stderr
    assert rss < 100 * 2**20, rss


def test_too_many_aliases_are_refused(tmp_path: Path) -> None:
    many = tmp_path / "aliases.yaml"
    many.write_text("x: &x 1\n" + "".join(f"k{i}: *x\n" for i in range(MAX_YAML_ALIASES + 1)))
    out, _ = cli(many)
    assert out.returncode == 1 and f"more than {MAX_YAML_ALIASES} YAML aliases" in out.stderr
    assert out.stderr.count("\n") == 0
    few = "x: &x {m: 1}\n" + "".join(f"k{i}: *x\n" for i in range(MAX_YAML_ALIASES))
    assert safe_yaml.load(few, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH,
                          max_aliases=MAX_YAML_ALIASES) == yaml.safe_load(few)


def test_self_referring_alias_is_refused() -> None:
    with pytest.raises(safe_yaml.DocumentRefused, match="infinite"):
        safe_yaml.load("a: &a [1, *a]", max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH, max_aliases=10)


def test_nesting_follows_the_services_limit(tmp_path: Path) -> None:
    at_limit, over = tmp_path / "ok.yaml", tmp_path / "deep.yaml"
    at_limit.write_text(nested(MAX_DEPTH))
    over.write_text(nested(MAX_DEPTH + 1))
    loaded = load_document(at_limit)
    study_doc.check_shape(loaded)  # the service accepts this depth as well
    with pytest.raises(study_doc.DocumentError):
        study_doc.check_shape(yaml.safe_load(over.read_text()))  # and refuses one more level
    out, _ = cli(over)
    assert out.returncode == 1 and f"nested deeper than {MAX_DEPTH} levels" in out.stderr
    # nesting reached through aliases counts too
    chain = "a: &a [1]\n" + "".join(f"l{i}: &l{i} [*{'a' if i == 0 else f'l{i - 1}'}]\n" for i in range(MAX_DEPTH))
    with pytest.raises(safe_yaml.DocumentRefused, match="aliases expanded the document is nested deeper"):
        safe_yaml.load(chain, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH, max_aliases=MAX_YAML_ALIASES)


def test_very_deep_document_is_no_recursion_error(tmp_path: Path) -> None:
    deep = tmp_path / "deeper.json"
    deep.write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elapsed, peak = refused_in_process(deep)
    assert elapsed < 5 and peak < 50_000_000, (elapsed, peak)
    out, _ = cli(deep)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "nested deeper" in out.stderr


def test_huge_documents_are_refused_before_parsing(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text(json.dumps({"name": "x", "description": "x" * MAX_BODY_BYTES}))
    elapsed, peak = refused_in_process(huge)
    assert elapsed < 5 and peak < 1_000_000, (elapsed, peak)  # not even read
    out, _ = cli(huge)
    assert out.returncode == 1 and f"over {MAX_BODY_BYTES:,} bytes" in out.stderr
    piped, _ = cli("-", stdin=huge.read_text())
    assert piped.returncode == 1 and f"over {MAX_BODY_BYTES:,} bytes" in piped.stderr


def test_syntax_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nb: }\n")
    out, _ = cli(bad)
    assert out.returncode == 1 and out.stderr.count("\n") == 0 and "line 2" in out.stderr, out.stderr


def test_docs_list_the_limits_the_code_enforces() -> None:
    from service.config import Settings
    from service.http import MAX_JSON_DEPTH
    from service.scheduling.samplers import MAX_REFERENCE_POINTS, OPTION_RANGES
    from service.studies import space
    from wire import space as parameters

    docs = (REPO / "docs" / "api.md").read_text()
    phrases = [
        f"| the request body | {MAX_BODY_BYTES:,} bytes |",
        f"| nesting of the document | {MAX_DEPTH} levels (any JSON body: {MAX_JSON_DEPTH}) |",
        f"in the CLI | {MAX_YAML_ALIASES},",
        f"| `space` | 1 to {space.MAX_PARAMETERS} parameters",
        f"1 to {parameters.MAX_CHOICES:,} distinct choices, strings up to {parameters.MAX_STRING:,} characters",
        f"at most {space.MAX_GRID_POINTS:,} points",
        f"| `parallelism` | 1 to {study_doc.MAX_PARALLELISM:,} |",
        f"| `kernel.options` | {study_doc.MAX_OPTION_KEYS} keys |",
        f"`studies`: {study_doc.MAX_WARM_STUDIES} study ids of your team, each of the same kernel; `trials` 0 to "
        f"{study_doc.MAX_WARM_CONFIGS}; `configs`: {study_doc.MAX_WARM_CONFIGS}, each",
        f"at most {MAX_REFERENCE_POINTS:,} NSGA-III reference points",
        f"After {Settings(database_url='sqlite://').auth_failure_limit} of them within a",
        *(f"`{key}` {int(low):,} to {int(high):,}" for key, (low, high) in OPTION_RANGES.items()),
    ]
    missing = [p for p in phrases if p not in docs]
    assert not missing, missing
