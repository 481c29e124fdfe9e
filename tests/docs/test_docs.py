"""The documentation's examples and claims, checked: README.md and every docs/*.md page.

The conventions are documented at the top of docs/development.md ("How the docs' examples are checked"):

* ```python blocks run in a fresh Python process from the repository root: a block whose first line starts with
  ``>>>`` is a doctest, any other block a script that must exit 0. HTML comments on the lines just above a fence
  are markers: ``<!-- not run: REASON -->`` (not run), ``<!-- needs: MODULE -->`` (skipped without MODULE),
  ``<!-- file: PATH -->`` (the block is a copy of the repository file PATH: its non-blank lines appear there, in
  order).
* ```cfg / ```ini blocks parse as cfg files and, when they name RULE/MODELFILE/MODELCLASS/DEVICES, pass
  ``session_request`` (no session is started); so do the launcher command lines of ```sh blocks, with their flags.
* every dotted ``theanompi.xxx`` name imports (attributes after the module resolve), every ``theanompi/...``,
  ``examples/...``, ``benchmarks/...``, ``tools/...``, ``launcher/...`` path exists, and a 0.1 path kept by
  ``MOVED_PATHS`` is only named beside its new path;
* the options table of docs/launching.md is the table of ``theanompi.core.session_options``: every row a real
  option with its keyword, every option a row, defaults and value sets matching;
* relative links and their anchors resolve; the README stays short and links the docs.

Nothing here starts a session; the blocks' runs are marked ``slow``.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 400

FENCE_RE = re.compile(r"^```(\S*)\s*$")
COMMENT_RE = re.compile(r"^<!--(.*)-->\s*$")
MARKER_RE = re.compile(r"^\s*(not run|needs|file)\s*:\s*(\S.*?)\s*$")
LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
DOTTED_RE = re.compile(r"(?<![\w.])theanompi(?:\.[A-Za-z_]\w*)+")
FILE_RE = re.compile(r"(?<![\w./$~-])((?:theanompi|examples|benchmarks|tools|launcher)/[\w./*-]*)")
BACKTICKED_RE = re.compile(r"`([^`]*)`")
DOCTEST_FLAGS = ("-o", "ELLIPSIS", "-o", "NORMALIZE_WHITESPACE")
BLOCK_TIMEOUT_S = 280  # generous: a cold compile cache makes the first pytensor function slow


# ----- reading the pages ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language tag, text, and the markers just above its fence."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with its markers; ValueError for an unknown marker or an unclosed fence."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE_RE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise ValueError(f"{page.name}:{i + 1}: a code block is never closed")
        markers, k = {}, i - 1
        while k >= 0 and COMMENT_RE.match(lines[k]):
            marker = MARKER_RE.match(COMMENT_RE.match(lines[k]).group(1))
            if not marker:
                raise ValueError(f"{page.name}:{k + 1}: {lines[k]!r} above a code block is not a known marker "
                                 "(not run: REASON, needs: MODULE, file: PATH)")
            markers[marker.group(1)] = marker.group(2)
            k -= 1
        blocks.append(Block(page, i + 1, opening.group(1).lower(), "\n".join(lines[i + 1:end]) + "\n", markers))
        i = end + 1
    return blocks


def prose(page: Path) -> str:
    """The page's text outside fenced blocks (fence lines and block bodies blanked, line count kept)."""
    out, inside = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE_RE.match(line) or (inside and line.rstrip() == "```"):
            inside = not inside
            out.append("")
        else:
            out.append("" if inside else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text.

    >>> slug("Multiverso users: `import theanompi.multiverso as mv`")
    'multiverso-users-import-theanompimultiverso-as-mv'
    """
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (a repeated heading gets GitHub's -1, -2 suffixes)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def links(page: Path) -> list[str]:
    """The link targets in ``page``'s prose (inline code and code blocks left out)."""
    return LINK_RE.findall(INLINE_CODE_RE.sub("", prose(page)))


def all_blocks(*langs: str) -> list[Block]:
    return [block for page in PAGES for block in read_blocks(page) if block.lang in langs]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def block_params(*langs: str) -> list:
    return [pytest.param(block, id=block.name) for block in all_blocks(*langs)]


# ----- the README and the links --------------------------------------------------------------------------------------
def test_the_pages_exist_and_read() -> None:
    names = {page.name for page in PAGES}
    expected = {"README.md", "launching.md", "rules.md", "model-contract.md", "zoo-and-data.md", "lasagne.md",
                "theano-mpi.md", "multiverso.md", "pytorch.md", "jax.md", "keras.md", "gpu.md", "several-hosts.md",
                "checkpoints-and-faults.md", "performance.md", "development.md"}
    assert expected <= names, f"missing pages: {sorted(expected - names)}"
    for page in PAGES:
        read_blocks(page)  # every fence closed, every marker known


def test_readme_is_short_and_leads_to_every_page() -> None:
    readme = ROOT / "README.md"
    n_lines = len(readme.read_text(encoding="utf-8").splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines; move text to docs/ (limit {README_MAX_LINES})"
    targets = {(readme.parent / target.split("#")[0]).resolve() for target in links(readme) if "://" not in target}
    index = DOCS / "README.md"
    assert index.resolve() in targets, "README.md does not link the docs index, docs/README.md"
    indexed = {(DOCS / target.split("#")[0]).resolve() for target in links(index) if "://" not in target}
    for page in DOCS.glob("*.md"):
        if page != index:
            assert page.resolve() in indexed, f"docs/README.md does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: {path.name} has no heading with anchor #{anchor}")
    assert not broken, f"{page_id(page)}: broken links:\n" + "\n".join(broken)


# ----- names and paths -----------------------------------------------------------------------------------------------
class OptionalMissing(Exception):
    """A dotted name's module needs an optional package that is not installed."""


def resolve_dotted(name: str) -> object:
    """The object a dotted name names: its longest importable module prefix, then attributes (or submodules)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError as err:
            if err.name and err.name.split(".")[0] != "theanompi":
                raise OptionalMissing(err.name) from None
            continue
    for part in parts[i:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif hasattr(obj, "__path__"):  # a package's submodule that is not imported yet
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        else:
            raise AttributeError(f"{getattr(obj, '__name__', obj)!s} has no attribute {part!r}")
    return obj


def moved_to(name: str, moved: dict[str, str]) -> str:
    """``name`` with a 0.1 prefix kept by the alias table replaced by its new path, as ``import`` would find it
    (:class:`theanompi.core.module_alias.AliasFinder`'s rule; importing the alias itself would leave it in
    ``sys.modules``, so a later import would not warn).

    >>> moved_to("theanompi.contract.WorkerConfig", {"theanompi.contract": "theanompi.models.contract"})
    'theanompi.models.contract.WorkerConfig'
    >>> moved_to("theanompi.models.layers.dense.DenseLayer", {"theanompi.models.layers": "theanompi.nn",
    ...                                                        "theanompi.models.layers.*": "theanompi.nn.layers.*"})
    'theanompi.nn.layers.dense.DenseLayer'
    """
    from theanompi.core.module_alias import AliasFinder

    return AliasFinder(moved).target_name(name) or name


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_dotted_names_resolve(page: Path) -> None:
    import theanompi
    from theanompi.core.module_alias import AliasFinder

    text = page.read_text(encoding="utf-8")
    names = sorted(set(DOTTED_RE.findall(text)))
    missing = []
    for name in names:
        try:
            resolve_dotted(moved_to(name, theanompi.MOVED_PATHS))
        except OptionalMissing:
            continue  # e.g. torch_classifier without torch: its name is checked where torch is installed
        except (ImportError, AttributeError) as err:
            missing.append(f"{name}: {type(err).__name__}: {err}")
    assert not missing, f"{page_id(page)} names what does not exist:\n" + "\n".join(missing)
    for paragraph in re.split(r"\n\s*\n", text):
        for name in set(DOTTED_RE.findall(paragraph)):
            match = AliasFinder(theanompi.MOVED_PATHS).match(name)
            if match is not None:
                new = match[1].rstrip(".")
                assert new in paragraph, (f"{page_id(page)}: {name} is 0.1's path; name {new} beside it "
                                          f"(the docs teach the new paths)")


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_file_paths_exist(page: Path) -> None:
    missing = []
    for raw in sorted(set(FILE_RE.findall(page.read_text(encoding="utf-8")))):
        path = raw.rstrip(".,;:")
        found = list(ROOT.glob(path.rstrip("/"))) if "*" in path else [ROOT / path] if (ROOT / path).exists() else []
        if not found:
            missing.append(path)
    assert not missing, f"{page_id(page)} names files that do not exist: {missing}"


# ----- cfg files and launcher lines ----------------------------------------------------------------------------------
def check_cfg_raw(raw: dict[str, str]) -> None:
    """What the launcher checks of a cfg's keys before planning: ConfigError naming a bad key or value."""
    from theanompi.launch.cfg import REQUIRED_KEYS, session_request

    if any(key in raw for key in REQUIRED_KEYS):
        session_request(raw, cwd=str(ROOT))


@pytest.mark.parametrize("block", block_params("cfg", "ini"))
def test_cfg_blocks_parse(block: Block) -> None:
    from theanompi.launch.cfg import parse_cfg_text

    check_cfg_raw(parse_cfg_text(block.text, source=block.name))


@pytest.mark.parametrize("block", block_params("sh", "bash", "shell", "console"))
def test_launcher_lines_parse(block: Block) -> None:
    from theanompi.launch.cfg import read_cfg_file
    from theanompi.launch.cli import build_parser

    parser = build_parser()
    for line in block.text.splitlines():
        argv = shlex.split(line, comments=True)
        if not argv or argv[0] != parser.prog:
            continue
        args = parser.parse_args(argv[1:])
        if args.model_options:  # tmlauncher --model-options MODELFILE:MODELCLASS: the class must be there
            model_class(args.model_options)
        if args.config is None:
            continue
        raw = read_cfg_file(ROOT / args.config)
        for flag in ("rule", "modelfile", "modelclass", "devices"):  # as the command line overrides the cfg
            if getattr(args, flag):
                raw[flag.upper()] = getattr(args, flag)
        for item in args.set:
            key, _, value = item.partition("=")
            raw[key.strip().upper()] = value.strip()
        raw.setdefault("DEVICES", "cpu0")  # left to --hostfile or a batch job's allocation (read when it runs)
        check_cfg_raw(raw)


COPIED_BLOCKS = [pytest.param(block, id=block.name) for block in all_blocks("python", "cfg", "ini", "sh")
                 if "file" in block.markers]


@pytest.mark.parametrize("block", COPIED_BLOCKS)
def test_copied_blocks_match_their_files(block: Block) -> None:
    source = ROOT / block.markers["file"]
    assert source.is_file(), f"{block.name}: file marker names {source}, which does not exist"
    remaining = iter([line.rstrip() for line in source.read_text(encoding="utf-8").splitlines()])
    for line in (line.rstrip() for line in block.text.splitlines() if line.strip()):
        assert any(line == candidate for candidate in remaining), (
            f"{block.name}: {line!r} is not in {block.markers['file']} (or not in the file's order)")


# ----- the options table ---------------------------------------------------------------------------------------------
def table_rows(page: Path, header_start: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table of ``page`` whose header row starts with ``header_start``."""
    lines = prose(page).splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "").startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return rows


def documented_options() -> dict[str, tuple[str, object, object]]:
    """cfg key -> (keyword, Option, default) of every option of every rule (a common option's common default)."""
    from theanompi.core.session_options import OPTIONS_BY_RULE, SessionOptions

    table = {}
    for cls in [*OPTIONS_BY_RULE.values(), SessionOptions]:  # the common defaults last: they win
        for f in fields(cls):
            assert f.default is not MISSING, f"{cls.__name__}.{f.name} has no plain default"
            table[f.metadata["option"].cfg_key] = (f.name, f.metadata["option"], f.default)
    return table


def rules_own_defaults() -> dict[str, dict[str, object]]:
    """cfg key -> {rule: default} of the common options that a rule declares with a default of its own."""
    from theanompi.core.session_options import OPTIONS_BY_RULE, SessionOptions

    common = {f.name: f.default for f in fields(SessionOptions)}
    own: dict[str, dict[str, object]] = {}
    for rule, options in OPTIONS_BY_RULE.items():
        for f in fields(options):
            if f.name in common and f.default != common[f.name]:
                own.setdefault(f.metadata["option"].cfg_key, {})[rule] = f.default
    return own


def choices_of(option) -> set[str] | None:
    """The values a choice option accepts (:meth:`~theanompi.core.options.Option.accepts`), or None for others."""
    text = option.accepts()
    return set(text.removeprefix("one of: ").split(", ")) if text.startswith("one of: ") else None


def test_options_table_is_the_options() -> None:
    from theanompi.launch.cfg import REQUIRED_KEYS

    rows = table_rows(DOCS / "launching.md", "|key|keyword|values|default|")
    options = documented_options()
    seen, problems = set(), []
    for key_cell, keyword_cell, values_cell, default_cell, _meaning in rows:
        key = BACKTICKED_RE.match(key_cell).group(1)
        if key in REQUIRED_KEYS or key == "MODEL_<NAME>":
            continue
        if key not in options:
            problems.append(f"{key} is not an option of any rule")
            continue
        seen.add(key)
        keyword, option, default = options[key]
        if BACKTICKED_RE.match(keyword_cell) is None or BACKTICKED_RE.match(keyword_cell).group(1) != keyword:
            problems.append(f"{key}: keyword is {keyword!r}, the table says {keyword_cell!r}")
        if default is None:
            if not default_cell.startswith("—"):
                problems.append(f"{key}: no default (filled in at launch); the cell must start with —, "
                                f"not {default_cell!r}")
        else:
            shown = BACKTICKED_RE.match(default_cell)
            if shown is None or option.parse(shown.group(1)) != default:
                problems.append(f"{key}: default is {default!r}, the table says {default_cell!r}")
        for rule, own in rules_own_defaults().get(key, {}).items():
            said = re.search(rf"\b{rule}: `([^`]*)`", default_cell)
            if said is None or option.parse(said.group(1)) != own:
                problems.append(f"{key}: {rule}'s default is {own!r}; the cell must say '{rule}: `{own}`', not "
                                f"{default_cell!r}")
        allowed = choices_of(option)
        if allowed is not None and set(BACKTICKED_RE.findall(values_cell)) != allowed:
            problems.append(f"{key}: values are {sorted(allowed)}, the table lists {values_cell!r}")
    problems += [f"{key} is an option but has no row" for key in sorted(set(options) - seen)]
    assert not problems, "docs/launching.md's options table:\n" + "\n".join(problems)


# ----- the model options tables --------------------------------------------------------------------------------------
MODEL_TABLE_RE = re.compile(r"^<!--\s*model options:\s*(\S+?)(?:\s+beyond\s+(\S+?))?\s*-->\s*$")
MODEL_TABLE_HEADER = "|key|values|default|meaning|"


@dataclass(frozen=True)
class ModelOptionsTable:
    """A table of docs/zoo-and-data.md under ``<!-- model options: MODELFILE:MODELCLASS [beyond MODELFILE:BASE] -->``:
    a row per option of MODELCLASS -- with ``beyond``, per option BASE lacks or MODELCLASS declares otherwise."""

    line: int
    reference: str
    beyond: str | None
    rows: tuple[tuple[str, ...], ...]

    @property
    def name(self) -> str:
        return f"docs/zoo-and-data.md:{self.line}"


def model_options_tables(page: Path = DOCS / "zoo-and-data.md") -> list[ModelOptionsTable]:
    lines = prose(page).splitlines()
    tables = []
    for i, line in enumerate(lines):
        marker = MODEL_TABLE_RE.match(line)
        if not marker:
            continue
        assert lines[i + 1].replace(" ", "") == MODEL_TABLE_HEADER, f"{page.name}:{i + 2}: not {MODEL_TABLE_HEADER}"
        rows = []
        for row in lines[i + 3:]:
            if not row.startswith("|"):
                break
            rows.append(tuple(cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip()[1:-1])))
        tables.append(ModelOptionsTable(i + 1, marker.group(1), marker.group(2), tuple(rows)))
    return tables


def model_class(reference: str) -> type:
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


def documented_model_options(table: ModelOptionsTable) -> dict:
    """cfg key -> ModelOption of each option the table must have a row for."""
    options = model_class(table.reference).option_table
    base = model_class(table.beyond).option_table if table.beyond else {}

    def differs(opt) -> bool:
        other = base.get(opt.name)
        return other is None or other.default != opt.default or other.option.accepts() != opt.option.accepts()

    return {opt.cfg_key: opt for opt in options.values() if differs(opt)}


@pytest.mark.parametrize("table", [pytest.param(t, id=t.name) for t in model_options_tables()])
def test_model_options_table_is_the_declaration(table: ModelOptionsTable) -> None:
    from theanompi.core.options import parse_literal

    options = documented_model_options(table)
    seen, problems = set(), []
    for key_cell, values_cell, default_cell, _meaning in table.rows:
        key = BACKTICKED_RE.match(key_cell).group(1)
        if key not in options:
            problems.append(f"{key} is not an option of {table.reference}" +
                            (f" that differs from {table.beyond}'s" if table.beyond else ""))
            continue
        assert key not in seen, f"{table.name}: {key} has two rows"
        seen.add(key)
        opt = options[key]
        if opt.default in ("", None):
            if not default_cell.startswith("—"):
                problems.append(f"{key}: no default; the cell must start with —, not {default_cell!r}")
        else:
            shown = BACKTICKED_RE.match(default_cell)
            if shown is None or opt.option.parse(parse_literal(shown.group(1))) != opt.option.parse(opt.default):
                problems.append(f"{key}: default is {opt.default!r}, the table says {default_cell!r}")
        allowed = choices_of(opt.option)
        if allowed is not None and set(BACKTICKED_RE.findall(values_cell)) != allowed:
            problems.append(f"{key}: values are {sorted(allowed)}, the table lists {values_cell!r}")
    problems += [f"{key} is an option but has no row" for key in options if key not in seen]
    assert not problems, f"{table.name}, the options of {table.reference}:\n" + "\n".join(problems)


def test_every_zoo_model_has_its_options_table() -> None:
    """Each zoo model is a table's MODELCLASS, or has the very options (defaults, values) of one."""
    from theanompi.models.zoo import MODELS

    def signature(cls: type) -> list:
        return [(o.name, o.default, o.option.accepts()) for o in cls.option_table.values()]

    documented = [signature(model_class(table.reference)) for table in model_options_tables()]
    missing = [name for name, module in MODELS.items() if signature(model_class(f"{module}:{name}")) not in documented]
    assert not missing, f"docs/zoo-and-data.md has no options table of {missing}"


# ----- running the python blocks -------------------------------------------------------------------------------------
def is_doctest(block: Block) -> bool:
    first = next((line for line in block.text.splitlines() if line.strip()), "")
    return first.lstrip().startswith(">>>")


@pytest.mark.slow
@pytest.mark.parametrize("block", block_params("python"))
def test_python_blocks_run(block: Block, tmp_path: Path) -> None:
    if "not run" in block.markers:
        pytest.skip(f"not run: {block.markers['not run']}")
    if "needs" in block.markers:
        pytest.importorskip(block.markers["needs"])
    source = tmp_path / ("block.txt" if is_doctest(block) else "block.py")
    source.write_text(block.text, encoding="utf-8")
    argv = [sys.executable, "-m", "doctest", *DOCTEST_FLAGS, str(source)] if is_doctest(block) else \
        [sys.executable, str(source)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{block.name} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"


def test_some_blocks_run_and_some_are_marked() -> None:
    blocks = all_blocks("python")
    runnable = [block for block in blocks if "not run" not in block.markers]
    assert len(runnable) >= 5 and any(is_doctest(block) for block in runnable)
    assert all(block.markers["not run"].strip() for block in blocks if "not run" in block.markers)
