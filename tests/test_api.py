"""The public API declared once (milliseconds, no engines): the magics' flags, the Python
keywords and the declarations (``ClusterOptions``, ``TuneOptions``) agree; the entry points
have real keywords; a message names ``trials=`` to Python and ``--trials`` to a magic; every
name DESIGN.md spells works after ``import jaxnb`` in a fresh interpreter."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re
import subprocess
import sys

import pytest

import jaxnb
import jaxnb.tune
from jaxnb._cluster import JaxCluster
from jaxnb._core import spelling
from jaxnb._core.options import ClusterOptions, keyword_fields, start_flags
from jaxnb._tune.options import TuneOptions
from jaxnb.magics import jax_cluster, jax_debug, jax_profile, jax_train, jax_tune, kit

REPO = pathlib.Path(__file__).resolve().parents[1]


def _keywords(function) -> dict[str, inspect.Parameter]:
    """The parameters of ``function`` after ``self``."""
    params = list(inspect.signature(function).parameters.values())
    return {p.name: p for p in params if p.name != "self"}


def _dests(magic) -> set[str]:
    """The argparse destinations of a magic's declared arguments."""
    return {action.dest for action in kit.declared(magic)}


# ---- cluster options: ClusterOptions, JaxCluster(...), %jax_cluster start ----------------


def _disagreements(fields: set[str], keywords: set[str], flags: set[str], flagged: set[str]) -> list[str]:
    """What does not agree between the declared options, the keywords and the start flags."""
    said = [f"keyword {k}= has no ClusterOptions field" for k in sorted(keywords - fields)]
    said += [f"field {f} is no JaxCluster keyword" for f in sorted(fields - keywords)]
    said += [f"flag for {d} declared outside ClusterOptions" for d in sorted(flags - flagged)]
    said += [f"field {d} has a Flag but no flag" for d in sorted(flagged - flags)]
    return said


def _cluster_sets() -> tuple[set[str], set[str], set[str], set[str]]:
    fields = {f.name for f in keyword_fields()}
    keywords = set(_keywords(JaxCluster.__init__))
    flags = _dests(jax_cluster.jax_cluster) - {"command", "replay", "size", "via"}
    return fields, keywords, flags, set(start_flags())


def test_cluster_options_flags_and_keywords_agree():
    assert _disagreements(*_cluster_sets()) == []
    assert set(start_flags()) <= {f.name for f in keyword_fields()}
    assert {"collective_timeout"} <= {f.name for f in keyword_fields()} - set(start_flags())
    assert jax_cluster.START_FLAGS["env"] == "--env"
    assert jax_cluster.START_FLAGS["n"] == "-n" and jax_cluster.START_FLAGS["init"] == "--no-init"
    assert jax_cluster.START_FLAGS["workdir_exclude"] == "--workdir-exclude"


def test_a_flag_added_in_one_place_only_is_caught():
    fields, keywords, flags, flagged = _cluster_sets()
    assert _disagreements(fields | {"new"}, keywords, flags, flagged) == [
        "field new is no JaxCluster keyword"]
    assert _disagreements(fields, keywords | {"new"}, flags, flagged) == [
        "keyword new= has no ClusterOptions field"]
    assert _disagreements(fields, keywords, flags | {"new"}, flagged) == [
        "flag for new declared outside ClusterOptions"]


def test_jax_clusters_defaults_are_the_declared_ones():
    defaults = {name: p.default for name, p in _keywords(JaxCluster.__init__).items()}
    assert ClusterOptions(**defaults) == ClusterOptions()


def test_every_start_flag_reads_its_text_into_the_keywords_value():
    args = jax_cluster.jax_cluster.parser.parse_argstring(
        "start -n 3 --hosts a,b:2 --workdir-exclude '*.bin,data' --sbatch=--gres=gpu:1 "
        "--sbatch=--mem=1G --no-init --timeout 2.5 --spares 0 --partition p")
    given = kit.given(args, "command", "replay", "size")
    assert given == {"n": 3, "hosts": ["a", "b:2"], "workdir_exclude": ["*.bin", "data"],
                     "sbatch": ["--gres=gpu:1", "--mem=1G"], "init": False, "timeout": 2.5,
                     "spares": 0, "partition": "p"}


# ---- train, tune, profile, run: real keywords, the magics' flags of the same names ---------


@pytest.mark.parametrize("entry", [JaxCluster.train, JaxCluster.tune, JaxCluster.profile,
                                   JaxCluster.run, jaxnb.tune.run, JaxCluster.__init__,
                                   JaxCluster.debug])
def test_entry_points_have_real_keywords_and_return_types(entry):
    signature = inspect.signature(entry)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds
    if entry is not JaxCluster.__init__:
        assert signature.return_annotation not in (inspect.Signature.empty, "Any")


@pytest.mark.parametrize(("magic", "entry", "magic_only", "api_only"), [
    (jax_train.jax_train, JaxCluster.train, {"func", "output", "attach"}, {"fn", "on_result"}),
    (jax_tune.jax_tune, JaxCluster.tune, {"func", "output", "attach"}, {"fn", "on_result", "show"}),
    (jax_profile.jax_profile, JaxCluster.profile, {"output"}, {"code", "on_result"}),
    (jax_cluster.jax_cluster_cell, JaxCluster.run, set(), {"code", "value"}),
    (jax_debug.jax_debug, JaxCluster.debug, set(), set()),
])
def test_each_flag_of_a_magic_is_a_keyword_of_the_same_name(magic, entry, magic_only, api_only):
    assert _dests(magic) - magic_only == set(_keywords(entry)) - api_only
    for dest in _dests(magic) - magic_only:
        assert spelling.flag_of(dest) in kit.declared_flags(magic), dest


def test_tune_options_are_the_keywords_of_tune_and_tune_run():
    declared = {f.name: f.default for f in dataclasses.fields(TuneOptions)}
    method = {k: p.default for k, p in _keywords(JaxCluster.tune).items()}
    assert {k: method[k] for k in declared} == declared
    assert set(method) - set(declared) == {"fn", "space", "on_result"}
    function = _keywords(jaxnb.tune.run)
    first, *rest = function.values()
    assert first.name == "cluster"
    assert [(p.name, p.default, p.kind) for p in rest] == [
        (p.name, p.default, p.kind) for p in _keywords(JaxCluster.tune).values()]


def test_train_takes_profile_steps_like_the_magic():
    assert "profile_steps" in _keywords(JaxCluster.train)
    assert "--profile-steps" in kit.declared_flags(jax_train.jax_train)


@pytest.mark.parametrize(("method", "magic"), [
    ("jax_cluster_line", jax_cluster.jax_cluster), ("jax_cluster_cell", jax_cluster.jax_cluster_cell),
    ("jax_train", jax_train.jax_train), ("jax_tune", jax_tune.jax_tune),
    ("jax_profile", jax_profile.jax_profile), ("jax_debug", jax_debug.jax_debug),
])
def test_each_magics_help_lists_every_flag_it_declares(method, magic):
    """What ``%jax_train?`` (and the others) show: the method's docstring."""
    from jaxnb.magics import JaxnbMagics

    shown = getattr(JaxnbMagics, method).__doc__
    assert all(flag in shown for flag in kit.declared_flags(magic))
    assert len(kit.declared_flags(magic)) >= 3


# ---- one message, two spellings -------------------------------------------------------------


@pytest.mark.parametrize(("make", "python", "magic"), [
    (lambda: TuneOptions(trials=0), "trials= takes a positive whole number, got 0; e.g. trials=20",
     "--trials takes a positive whole number, got 0; e.g. --trials 20"),
    (lambda: TuneOptions(mode="best"), "mode= takes min or max, got 'best'; e.g. mode='max' for",
     "--mode takes min or max, got 'best'; e.g. --mode max for"),
    (lambda: TuneOptions(steps=0), "steps= takes a positive whole number, got 0; e.g. steps=1000",
     "--steps takes a positive whole number, got 0; e.g. --steps 1000"),
    (lambda: JaxCluster(n=0), "n= must be at least 1, got 0; e.g. n=2",
     "-n must be at least 1, got 0; e.g. -n 2"),
    (lambda: JaxCluster(init=False, spares=-1), "spares= must be a whole number >= 0",
     "--spares must be a whole number >= 0"),
    (lambda: JaxCluster(partition="p"), "partition= is for engines='slurm' only; add engines='slurm'",
     "--partition is for --engines slurm only; add --engines slurm"),
    (lambda: JaxCluster(n=2).tune("f", {}, trials=0), "trials= takes a positive",
     "--trials takes a positive"),
    (lambda: JaxCluster(n=2).train("f", profile_steps="5:2"),
     "profile_steps=(5, 2): the first step comes after the last; e.g. profile_steps=(2, 5)",
     "--profile-steps 5:2: the first step comes after the last; e.g. --profile-steps 2:5"),
    (lambda: JaxCluster(n=2).train("f", profile_steps=(1, 2), background=True),
     "profile_steps= does not go with background=True", "--profile-steps does not go with --background"),
    (lambda: JaxCluster(n=2).run("1", all=True, process=0), "all=True and process= do not go together",
     "--all and --process do not go together"),
])
def test_the_python_api_names_keywords_and_a_magic_names_flags(make, python, magic):
    with pytest.raises(ValueError) as from_python:
        make()
    assert str(from_python.value).startswith(python)
    with spelling.as_flags(), pytest.raises(ValueError) as from_magic:
        make()
    assert str(from_magic.value).startswith(magic)


def _spelled_keywords() -> set[tuple[str, str]]:
    """Every keyword a message spells through ``jaxnb._core.spelling`` (file, keyword)."""
    names = {"option", "bare", "example", "flag_of", "spelled"}
    found = set()
    for path in (REPO / "jaxnb").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0]
            if called in names and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add((path.name, first.value))
    return found


def test_every_spelled_keyword_is_a_flag_of_some_magic():
    magics = [jax_cluster.jax_cluster, jax_cluster.jax_cluster_cell, jax_train.jax_train, jax_tune.jax_tune,
              jax_profile.jax_profile, jax_debug.jax_debug]
    flags = {flag for magic in magics for flag in kit.declared_flags(magic)}
    spelled = _spelled_keywords()
    assert {"trials", "max_failures", "profile_steps", "resume", "address"} <= {k for _, k in spelled}
    assert {(f, k) for f, k in spelled if spelling.flag_of(k) not in flags} == set()


# ---- every name DESIGN.md spells works after `import jaxnb` ---------------------------------

#: The names DESIGN.md spells (its ``jaxnb.X.Y`` names, the ``jaxnb.tune`` helpers it lists,
#: the ``JaxCluster`` methods and the errors of its Python API paragraph).
DESIGN_NAMES = {
    "jaxnb.JaxCluster", "jaxnb.breakpoint", "jaxnb.get_checkpoint", "jaxnb.get_context",
    "jaxnb.get_dataset_shard", "jaxnb.report", "jaxnb.should_stop", "jaxnb.tune.loguniform",
    "jaxnb.tune.uniform", "jaxnb.tune.randint", "jaxnb.tune.choice", "jaxnb.tune.run",
    *(f"jaxnb.JaxCluster.{m}" for m in (
        "start", "run", "train", "tune", "profile", "pull", "push", "status", "memory", "stacks",
        "reset", "restart", "scale", "stop", "__enter__", "__exit__", "attach", "detach")),
    "jaxnb.clusters",
    *(f"jaxnb.{e}" for e in ("JaxnbError", "StartError", "ClusterStateError", "RemoteError",
                             "ProcessFailure", "ReplayError")),
}
#: Names of features not built yet: issue number.
PENDING: dict[str, int] = {}


def _design() -> str | None:
    """DESIGN.md, where the workspace keeps it next to the checkout (``../shared``)."""
    for folder in (REPO, REPO.parent / "shared", REPO.parents[1] / "shared"):
        if (folder / "DESIGN.md").is_file():
            return (folder / "DESIGN.md").read_text()
    return None


def test_the_list_holds_every_dotted_name_of_design_md():
    text = _design()
    if text is None:
        pytest.skip("DESIGN.md is not next to this checkout; the list above is checked below")
    dotted = set(re.findall(r"`(jaxnb(?:\.\w+)+)", text))
    api = text[text.index("Python API, for scripts"):]
    methods = {f"jaxnb.JaxCluster.{m}" for m in re.findall(r"`(\w+)\(", api[: api.index("Errors:")])}
    errors = {f"jaxnb.{e}" for e in re.findall(r"`(\w+)`", api[api.index("Errors:"):].split("\n")[0])}
    assert dotted | methods | errors <= DESIGN_NAMES


def test_every_design_name_resolves_after_import_jaxnb_in_a_fresh_interpreter():
    code = (
        "import sys, jaxnb\n"
        "for name in sys.argv[1:]:\n"
        "    value = jaxnb\n"
        "    try:\n"
        "        for part in name.split('.')[1:]:\n"
        "            value = getattr(value, part)\n"
        "    except AttributeError:\n"
        "        print(name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *sorted(DESIGN_NAMES)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert set(out.stdout.split()) == set(PENDING), "a name works now: drop it from PENDING"
