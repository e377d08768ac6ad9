"""Every `seqbench ...` command line the docs show (README.md and docs/**/*.md: code blocks,
`\\` continuations, the `$ ` lines of transcripts, inline code spans) is checked against the
real CLI without running it: the command path exists, every option exists for that command
and has its value where it needs one, values are among those the code's registries (else the
option's help) take, numbers are numbers, the models, datasets, protocols, papers, committed
studies and config keys it names exist. Option spans in prose and study files shown are
checked too. The commands that run offline in seconds on the synthetic dataset are then run in
a temp folder and must exit 0."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main

try:  # recent typer bundles its own click
    from typer._click.exceptions import ClickException
except ImportError:
    from click import ClickException

from seqbench.cli import _load_commands, main
from seqbench.cli.app import app, console, console_err
from seqbench.cli.audit import AUDIT_FORMATS
from seqbench.data.registry import dataset_names
from seqbench.errors import SeqbenchError
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import PRECISIONS
from seqbench.models.base import MODELS, config_keys, get_model, resolve_config
from seqbench.report.layouts import LAYOUTS
from seqbench.report.render import FORMATS
from seqbench.report.stats import CORRECTIONS, TESTS
from seqbench.runs.executors import EXECUTORS
from seqbench.runs.reevaluate import SPLITS
from seqbench.runs.tracking import TRACKERS
from seqbench.study.parse import load_study, parse_study
from seqbench.yamlsafe import load_yaml

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```.*?\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
#: where a command may start in a code line: the line's start, after a shell separator, after
#: `python -m` / `torchrun ... -m`, or as a YAML value (`prepare: {beauty: seqbench ...}`),
#: after any environment settings (`SEQBENCH_DATA=d seqbench ...`)
START = re.compile(
    r"(?:^|&&|\|\||;|\|\s|-m\s|:\s)\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(seqbench)(?=\s+[a-z-])"
)
#: the command whose output a checked block shows (`tests/test_docs_examples.py`)
MARKER = re.compile(r"<!-- checked: (seqbench [^(]*?) \(")
#: where a command ends: a shell separator, a comment, a redirect, a YAML flow's end
END = re.compile(r"\s(?:&&|\|\||;|\||#|\d?>).*$|[;}].*$")
ELLIPSIS = {"…", "..."}


@dataclass(frozen=True)
class DocCommand:
    """One command line a page shows; `inline` for a code span in prose (which may name a
    command without its required arguments, `seqbench study run`)."""

    page: str
    line: int
    text: str
    inline: bool

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _block_commands(page: str, body: str, first_line: int) -> list[DocCommand]:
    """The commands of one fenced block: in a transcript (lines starting `$ `) only those
    lines; continuations (`\\` at a line's end) joined."""
    lines = body.splitlines()
    transcript = any(x.startswith("$ ") for x in lines)
    out = []
    i = 0
    while i < len(lines):
        start = i
        line = lines[i]
        if transcript and not line.startswith("$ "):
            i += 1
            continue
        line = line.removeprefix("$ ")
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        for m in START.finditer(line):
            command = END.sub("", line[m.start(1) :]).strip()
            out.append(DocCommand(page, first_line + start, command, inline=False))
    return out


def doc_commands() -> list[DocCommand]:
    """Every seqbench command line of every page, in page order."""
    out: list[DocCommand] = []
    for path in PAGES:
        page = path.relative_to(REPO).as_posix()
        text = path.read_text()
        prose = text
        for m in FENCE.finditer(text):
            out += _block_commands(page, m[1], _line_of(text, m.start(1)))
            prose = prose[: m.start()] + re.sub(r"[^\n]", " ", m[0]) + prose[m.end() :]
        for m in MARKER.finditer(prose):
            out.append(DocCommand(page, _line_of(text, m.start()), m[1], inline=False))
        for m in SPAN.finditer(prose):
            span = END.sub("", " ".join(m[1].split()))
            if re.match(r"seqbench [a-z-]", span):
                out.append(DocCommand(page, _line_of(text, m.start()), span, inline=True))
    return out


COMMANDS = doc_commands()


def is_placeholder(token: str) -> bool:
    """NAME, DIR, RUN_ID, HEAD_IP:6379, results/X, <...> (also in a word: results/<folder>),
    … stand for what a reader fills in."""
    return bool(
        re.fullmatch(r"[A-Z][A-Z0-9_]*(?::\d+)?", token.rsplit("/", 1)[-1])
        or re.search(r"<[^>]*>", token)
        or any(e in token for e in ELLIPSIS)
    )


def declared_choices(param) -> list[str] | None:
    """The values an option's help declares (`markdown | latex | csv | html`); the CLI's
    string options declare their choices there (None: free)."""
    words = r"[\w:.-]+(?: \([^)]*\))?"
    m = re.search(rf"(?<![\w-])({words}(?: \| {words})+)", param.help or "")
    if m is None:
        return None
    return [re.sub(r" \(.*", "", w) for w in m[1].split(" | ")]


#: the registries the code looks option values up in (what it takes, whatever the help says)
REGISTERED = {
    "--layout": LAYOUTS.names,
    "--format": FORMATS.names,
    "--test": TESTS.names,
    "--correction": CORRECTIONS.names,
    "--executor": EXECUTORS.names,
    "--track": TRACKERS.names,
    "--split": lambda: list(SPLITS),
    "--precision": lambda: list(PRECISIONS),
    "--device": lambda: ["auto", "cpu", "cuda", "cuda:N", "mps"],  # machine.resolve_device's
}


def choices(command: str, param) -> list[str] | None:
    """The values an option takes: its registry's names, else those its help declares."""
    if command == "seqbench audit" and param.name == "format_":
        return list(AUDIT_FORMATS)
    registry = REGISTERED.get(param.opts[0])
    return registry() if registry is not None else declared_choices(param)


def choice_ok(value: str, choices: list[str]) -> bool:
    """`value` is one of `choices`, where `cuda:N` takes any N."""
    return any(
        re.fullmatch(re.sub(r":[A-Z]$", r":\\d+", re.escape(c).replace(r"\:", ":")), value)
        for c in choices
    )


def tokens(cmd: DocCommand) -> list[str]:
    """The words after `seqbench`: quotes undone, `[...]` marking optional parts unwrapped,
    `--debug` (any command, taken by `main`) dropped."""
    words = shlex.split(cmd.text)[1:]
    words = [w.removeprefix("[").removesuffix("]") for w in words]
    return [w for w in words if w and w != "--debug"]


def _values(opts: dict, name: str) -> list[str]:
    value = opts.get(name)
    if value is None:
        return []
    values = value if isinstance(value, list | tuple) else [value]
    return [v for v in values if isinstance(v, str)]


def _names(values: list[str]) -> list[str]:
    """Comma-separated lists split, placeholders left out."""
    return [x for v in values for x in v.split(",") if x and not is_placeholder(x)]


def resolve(words: list[str]):
    """(command path, click command, its context, the words left) for `words`, or the
    problem when a command word does not exist."""
    _load_commands()
    command = typer.main.get_command(app)
    words = list(words)
    path = ["seqbench"]
    ctx = command.context_class(command, info_name="seqbench")
    while hasattr(command, "commands") and words and not words[0].startswith("-"):
        sub = command.commands.get(words[0])
        if sub is None:
            known = ", ".join(sorted(command.commands))
            return f"`{' '.join(path)}` has no command {words[0]!r} (it has: {known})"
        path.append(words.pop(0))
        command = sub
        ctx = command.context_class(command, info_name=path[-1], parent=ctx)
    return " ".join(path), command, ctx, words


def problems(cmd: DocCommand) -> list[str]:
    """What is wrong with `cmd` against the CLI (empty: nothing)."""
    resolved = resolve(tokens(cmd))
    if isinstance(resolved, str):
        return [resolved]
    name, command, ctx, words = resolved
    elided = cmd.inline or bool(ELLIPSIS & set(shlex.split(cmd.text)))  # may omit arguments
    if hasattr(command, "commands") and not command.params:
        if words and words != ["--help"]:
            return [f"`{name}` takes a command, not {words[0]!r}"]
        return []
    try:  # the real option parser: unknown options, options missing their value
        opts, extra, order = command.make_parser(ctx).parse_args(list(words))
    except ClickException as e:  # unknown option, missing value, ...
        return [f"`{name}`: {e.format_message()}"]
    extra = [w for w in extra if w not in ELLIPSIS]  # `…`: more words of the reader's
    if extra:
        return [f"`{name}` takes no more arguments: {' '.join(extra)}"]
    if opts.get("help"):
        return []
    found = [
        f"`{name} {p.opts[0]}` is hidden from --help: {p.help or 'not for users'}"
        for p in dict.fromkeys(order)
        if getattr(p, "hidden", False)
    ]
    for param in command.params:
        if param.param_type_name == "argument":
            if param.required and opts.get(param.name) in (None, (), []) and not elided:
                found.append(f"`{name}` needs its argument {param.name.upper()}")
            continue
        takes = None if param.is_flag else choices(name, param)
        number = _number_kind(param)
        for value in _values(opts, param.name):
            if is_placeholder(value):
                continue
            if takes and not choice_ok(value, takes):
                found.append(f"`{name} {param.opts[0]}` takes {'|'.join(takes)}, not {value!r}")
            if number is not None:
                try:
                    number(value)
                except ValueError:
                    found.append(f"`{name} {param.opts[0]}` takes a number, not {value!r}")
    found += _registry_problems(name, opts)
    return found or _config_problems(name, opts)


def _number_kind(param) -> type | None:
    """int or float for an option holding numbers (alone or a list), else None."""
    descriptor = getattr(param, "type_descriptor", None)  # typer with its own click
    if descriptor is not None:
        hint = descriptor.annotation
        return next((k for k in (int, float) if hint is k or hint == list[k]), None)
    kind = getattr(getattr(param, "type", None), "name", "")  # click's INT, FLOAT, ranges
    return int if kind.startswith("integer") else float if kind.startswith("float") else None


def _registry_problems(name: str, opts: dict) -> list[str]:
    """Models, datasets, protocols, papers and committed studies the command names exist."""
    found = []
    get_model("sasrec")  # registers every model
    if not opts.get("plugin"):  # a plugin's model is not in the registry
        named = _names([v for k in ("model", "models", "baseline") for v in _values(opts, k)])
        models = ", ".join(MODELS.names())
        found += [f"no model {m!r} (models: {models})" for m in named if m not in MODELS]
    datasets = set(dataset_names(expand=True))
    keys = ("dataset", "datasets") + (("name",) if name == "seqbench prepare" else ())
    if name == "seqbench reproduce":  # takes a paper's dataset names too
        keys = ()
    for d in _names([v for k in keys for v in _values(opts, k)]):
        if d not in datasets:
            found.append(f"no dataset {d!r} in the registry (`seqbench datasets`)")
    for key in ("protocol", "evaluated_under"):
        for p in _names(_values(opts, key)):
            try:
                get_protocol(p)
            except SeqbenchError as e:
                found.append(f"--protocol {p}: {e}")
    for spec in _names(_values(opts, "spec")):
        papers = REPO / "seqbench" / "papers"
        if not any((papers / f"{spec}{ext}").is_file() for ext in (".study.yaml", ".yaml")):
            found.append(f"no paper or study {spec!r} in seqbench/papers/")
    for folder in _names(_values(opts, "folder")):
        if not folder.startswith("results/"):
            continue
        if not (REPO / folder / "study.yaml").is_file():
            found.append(f"no committed study {folder}/study.yaml")
            continue
        try:
            load_study(REPO / folder / "study.yaml")
        except SeqbenchError as e:
            found.append(str(e))
    return found


def _config_problems(name: str, opts: dict) -> list[str]:
    """The config keys and values a run, sweep or check sets (`--set`, `--grid`, `--ablate`,
    `--space`) are the model's, each value as the run's own config resolution takes it."""
    model = opts.get("model")
    if name not in ("seqbench run", "seqbench sweep", "seqbench check") or model not in MODELS:
        return []
    model_cls = get_model(model)
    dataset = next(iter(_names(_values(opts, "dataset"))), "synthetic")
    found = []
    # (the option, its parameter's name, whether it takes a comma-separated list of values)
    for option, param, several in (
        ("set", "set_", False),
        ("grid", "grid", True),
        ("ablate", "ablate", name == "seqbench sweep"),
    ):
        for setting in _values(opts, param):
            key, _, raw = setting.partition("=")
            for value in raw.split(",") if several else [raw]:
                if is_placeholder(value):
                    continue
                layer = {"ablate": {key: value}} if option == "ablate" else {"sets": {key: value}}
                try:
                    resolve_config(model_cls, dataset, **layer)
                except SeqbenchError as e:
                    found.append(f"--{option} {setting}: {e}")
    for dimension in _values(opts, "space"):
        key = dimension.partition("=")[0]
        if model_cls.key_aliases.get(key, key) not in config_keys(model_cls.Config):
            found.append(f"--space {dimension}: {model} has no config key {key!r}")
    return found


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_a_documented_command_matches_the_cli(cmd: DocCommand) -> None:
    found = problems(cmd)
    assert not found, f"{cmd.id}: {cmd.text}\n" + "\n".join(found)


def test_every_page_with_commands_is_read() -> None:
    """The extraction finds the commands (a broken pattern would pass every case)."""
    pages = {c.page for c in COMMANDS}
    assert len(COMMANDS) >= 80
    assert {"README.md", "docs/quickstart.md", "docs/tutorials/sweep.md"} <= pages
    texts = {c.text for c in COMMANDS}
    assert "seqbench report --format markdown" in texts  # after `&&` in the README
    assert "seqbench prepare beauty --raw-dir ../shared/data/s3rec" in texts  # YAML and `$ `
    assert "seqbench run sasrec -d synthetic --epochs 2 --threads 1" in texts  # torchrun -m
    assert _block_commands("p", "X_Y=1 seqbench runs \\\n  --model sasrec # all\n", 1) == [
        DocCommand("p", 1, "seqbench runs --model sasrec", inline=False)
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("seqbench report --format pdf", "takes csv|html|latex|markdown, not 'pdf'"),
        ("seqbench report --layout overal", "not 'overal'"),
        ("seqbench audit synthetic --format html", "takes text|markdown|csv, not 'html'"),
        ("seqbench evaluate r --protocol seqbench --split val", "takes test|valid, not 'val'"),
        ("seqbench report --fromat markdown", "No such option: --fromat"),
        ("seqbench study runn results/stosa", "has no command 'runn'"),
        ("seqbench study run results/nope", "no committed study results/nope"),
        ("seqbench run sasrec --epochs", "'--epochs' requires an argument"),
        ("seqbench run sasrec --epochs two", "takes a number, not 'two'"),
        ("seqbench run -d synthetic", "needs its argument MODEL"),
        ("seqbench run sasrec --dry-run=yes", "'--dry-run' does not take a value"),
        ("seqbench sweep sasrec --executor dask", "takes local|ray, not 'dask'"),
        ("seqbench run sasrec --device gpu", "not 'gpu'"),
        ("seqbench run sasrecc -d synthetic", "no model 'sasrecc'"),
        ("seqbench run sasrec -d synthtic", "no dataset 'synthtic'"),
        ("seqbench run sasrec --protocol gtss", "unknown protocol 'gtss'"),
        ("seqbench reproduce cbit-table9", "no paper or study 'cbit-table9'"),
        ("seqbench models sasrec extra", "takes no more arguments: extra"),
        ("seqbench run sasrec --amp", "`seqbench run --amp` is hidden from --help: replaced by"),
        ("seqbench sweep cbit --grid tau=0.1,x", "bad value 'x' for 'tau'"),
        ("seqbench run sasrec --set dropot=0.1", "unknown config key 'dropot'"),
        ("seqbench run sasrec --ablate los=ce", "unknown ablation axis 'los'"),
        ("seqbench sweep sasrec --search random --space l=1e-4:1e-2", "no config key 'l'"),
    ],
)
def test_the_check_finds_a_wrong_command(text: str, why: str) -> None:
    """Lines made wrong on purpose (an oracle for the check itself): each one problem."""
    found = problems(DocCommand("page.md", 1, text, inline=False))
    assert len(found) == 1 and why in found[0], found


def test_the_check_takes_placeholders_and_right_commands() -> None:
    for text in (
        "seqbench run sasrec --device cuda:1 --precision bf16 --epochs 3",
        "seqbench evaluate RUN_ID --protocol P [--split valid]",
        "seqbench runs migrate [STORE ...] [--rename-in FILES]",
        "seqbench run … --procs N",
        "seqbench prepare ml-20m --raw-dir …",
        "seqbench prepare amazon2018-<category>",
        "seqbench study show results/<folder>",
        "seqbench study run results/X --render-only",
        "seqbench run nova_bert -d DATASET --ablate mode=… --set d=64",
        "seqbench report --layout ablation --test ttest --correction holm",
        "seqbench report --layout audit --protocol gts",  # registered, not in the help
        "seqbench --help",
        "seqbench study run results/stosa --device cuda:1",  # as `run` takes it
    ):
        assert problems(DocCommand("page.md", 1, text, inline=False)) == [], text
    assert problems(DocCommand("page.md", 1, "seqbench run", inline=True)) == []  # a name


def test_a_documented_study_file_parses() -> None:
    """A YAML block of the docs that is a study (`models:` and `tables:`) is one the study
    parser takes, keys and values."""
    studies = []
    for path in PAGES:
        for m in re.finditer(r"^```yaml\n(.*?)^```", path.read_text(), re.S | re.M):
            if re.search(r"^models:", m[1], re.M) and re.search(r"^tables:", m[1], re.M):
                where = str(path.relative_to(REPO))
                studies.append(parse_study(load_yaml(m[1], where), where))
    assert len(studies) >= 2  # the study and own-model tutorials'


#: options the docs show for other tools than seqbench, with the tool
OTHER_TOOLS = {"--study": "bench/gpu.py", "--quick": "bench/gpu.py", "--temp-dir": "ray start"}


def test_every_option_named_in_prose_exists() -> None:
    """An option span in prose (`--gpus-per-run`, `--device cpu --quick`) names an option of
    some seqbench command (or of the other tool it is shown for)."""
    _load_commands()
    known = set(OTHER_TOOLS) | {"--help", "--debug"}

    def walk(command) -> None:
        for param in command.params:
            known.update(param.opts + param.secondary_opts)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    unknown = []
    for path in PAGES:
        text = path.read_text()
        for m in SPAN.finditer(text):
            if m[1].startswith("-"):
                for option in re.findall(r"(?<![\w-])--?[a-z][\w-]*", m[1]):
                    if option not in known:
                        unknown.append(
                            f"{path.relative_to(REPO)}:{_line_of(text, m.start())}: {option}"
                        )
    assert not unknown, "options no command has:\n" + "\n".join(unknown)


#: commands that run offline in seconds (besides any --help): on the synthetic data only
CHEAP = {"seqbench datasets", "seqbench models", "seqbench runs", "seqbench new-model"}


def runnable(cmd: DocCommand) -> bool:
    """Runs offline in seconds on the synthetic dataset, and fully written out."""
    words = tokens(cmd)
    if any(is_placeholder(w) for w in shlex.split(cmd.text)[1:]) or "--plugin" in words:
        return False
    if "--help" in words:
        return True
    resolved = resolve(words)
    if isinstance(resolved, str):
        return False
    path, _, _, rest = resolved
    if path in CHEAP or f"{path} {' '.join(rest)}" == "seqbench prepare synthetic":
        return True
    if path == "seqbench study show":  # a committed study, copied into the temp folder
        return True
    offline = not {"--executor", "--procs", "--device", "--address"} & set(words)
    on_synthetic = all(
        w == "synthetic" for w, p in zip(words[1:], words, strict=False) if p in ("-d", "--dataset")
    )
    return "--dry-run" in words and offline and on_synthetic and path == "seqbench run"


RUNNABLE = [c for c in COMMANDS if runnable(c)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    """A temp folder with the synthetic dataset prepared, as the working directory."""
    root = tmp_path_factory.mktemp("docs_commands")
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    for con in (console, console_err):
        mp.setattr(con, "width", 120)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["prepare", "synthetic"])
        yield root
    finally:
        mp.undo()


@pytest.mark.parametrize("cmd", RUNNABLE, ids=[c.id for c in RUNNABLE])
def test_a_documented_command_runs(cmd: DocCommand, folder: Path) -> None:
    for made in folder.glob("*.py"):  # `new-model` refuses to overwrite
        made.unlink()
    shutil.rmtree(folder / "results", ignore_errors=True)
    for study in [w for w in tokens(cmd) if w.startswith("results/")]:  # a committed study
        (folder / study).mkdir(parents=True)
        shutil.copy(REPO / study / "study.yaml", folder / study)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            main(tokens(cmd))
            code = 0
        except SystemExit as e:
            code = e.code or 0
    assert code == 0, f"{cmd.id}: {cmd.text} exited {code}: {err.getvalue()[-500:]}"
