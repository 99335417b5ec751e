"""Mesh and sharding view: engine-side descriptions and kernel-side rendering.

JAX runs in a subprocess with 4 CPU devices (the test process may already have
a JAX backend configured differently); the descriptions come back as JSON and
are rendered here, as in the notebook kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jaxnb._widgets._display import widget_bundle
from jaxnb._widgets.mesh_view import (
    mesh_html,
    mesh_widget,
    sharding_html,
    sharding_widget,
    show,
)
from jaxnb._widgets.palette import process_colour

REPO = Path(__file__).resolve().parents[1]

ENGINE_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxnb._engine.layout.describe import describe, describe_array, describe_mesh
    from jaxnb import _mesh

    devs = jax.devices()
    assert len(devs) == 4, devs
    mesh1 = Mesh(np.array(devs), ("x",))
    mesh2 = Mesh(np.array(devs).reshape(2, 2), ("x", "y"))

    def put(shape, mesh, spec):
        data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        return jax.device_put(data, NamedSharding(mesh, spec))

    out = {
        "mesh1": describe(mesh1),
        "mesh2": describe(mesh2),
        "a1": describe(put((8,), mesh1, P("x"))),
        "a2": describe(put((8, 6), mesh2, P("x", "y"))),
        "rep": describe(put((4, 4), mesh2, P())),
        "part": describe(put((8, 6), mesh2, P("x", None))),
        "flat": describe(put((8,), mesh2, P(("x", "y")))),
        "r3": describe(put((4, 6, 8), mesh2, P("x", None, "y"))),
        "single": describe(jax.numpy.zeros(3)),
        "scalar": describe(put((), mesh2, P())),
    }
    deleted = put((8, 6), mesh2, P("x", "y"))
    deleted.delete()
    out["deleted"] = describe_array(deleted)

    errors = {}
    for label, bad in [("int", 3), ("numpy", np.zeros(3))]:
        try:
            describe(bad)
        except TypeError as e:
            errors[label] = str(e)

    @jax.jit
    def traced(x):
        try:
            describe(x)
        except TypeError as e:
            errors["tracer"] = str(e)
        return x

    traced(np.zeros(3))
    out["errors"] = errors

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        _mesh.show_mesh(mesh2, name="mesh2")
        _mesh.show_sharding(put((8, 6), mesh2, P("x", "y")), name="w")
    out["shown"] = shown.getvalue()
    out["describe_mesh_is_describe"] = describe_mesh(mesh1) == out["mesh1"]
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    """
)


@pytest.fixture(scope="module")
def desc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("mesh_view") / "desc.json"
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "4", "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", ENGINE_SCRIPT, str(path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(path.read_text())


def _cell(d: dict[str, Any]) -> tuple[int, int]:
    return d["id"], d["process_index"]


# -- describe (engine side) -------------------------------------------------


def test_describe_mesh_1d(desc: dict[str, Any]) -> None:
    m = desc["mesh1"]
    assert m["kind"] == "mesh"
    assert m["axis_names"] == ["x"] and m["axis_sizes"] == [4]
    assert [_cell(d) for d in m["devices"]] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert {d["platform"] for d in m["devices"]} == {"cpu"}
    assert len(m["processes"]) == 1 and m["processes"][0]["index"] == 0
    assert m["processes"][0]["host"]  # this process: socket.gethostname()
    assert desc["describe_mesh_is_describe"]


def test_describe_mesh_2d(desc: dict[str, Any]) -> None:
    m = desc["mesh2"]
    assert m["axis_names"] == ["x", "y"] and m["axis_sizes"] == [2, 2]
    assert [[d["id"] for d in row] for row in m["devices"]] == [[0, 1], [2, 3]]
    assert set(m["devices"][0][0]) >= {"id", "process_index", "platform", "kind", "host"}


def test_describe_array_1d(desc: dict[str, Any]) -> None:
    a = desc["a1"]
    assert a["shape"] == [8] and a["dtype"] == "float32"
    assert a["sharding"]["type"] == "NamedSharding"
    assert a["sharding"]["spec"] == [["x"]]
    assert [(b["index"], b["devices"]) for b in a["blocks"]] == [
        ([[0, 2]], [0]),
        ([[2, 4]], [1]),
        ([[4, 6]], [2]),
        ([[6, 8]], [3]),
    ]
    assert all(b["replicas"] == 1 for b in a["blocks"])
    assert not a["fully_replicated"]


def test_describe_array_2d_both_axes(desc: dict[str, Any]) -> None:
    a = desc["a2"]
    blocks = {b["devices"][0]: b["index"] for b in a["blocks"]}
    assert blocks == {
        0: [[0, 4], [0, 3]],
        1: [[0, 4], [3, 6]],
        2: [[4, 8], [0, 3]],
        3: [[4, 8], [3, 6]],
    }
    assert a["sharding"]["replicated_over"] == []
    assert [d["block"] for d in a["devices"]] == [0, 1, 2, 3]


def test_describe_replicated(desc: dict[str, Any]) -> None:
    a = desc["rep"]
    assert a["fully_replicated"]
    assert a["blocks"] == [
        {"index": [[0, 4], [0, 4]], "devices": [0, 1, 2, 3], "process_indices": [0], "replicas": 4}
    ]
    assert a["sharding"]["spec"] == [None, None]
    assert a["sharding"]["replicated_over"] == ["x", "y"]
    assert [ax["by"] for ax in a["axes"]] == ["replicated", "replicated"]


def test_describe_partially_replicated(desc: dict[str, Any]) -> None:
    a = desc["part"]
    assert [(b["index"], b["devices"], b["replicas"]) for b in a["blocks"]] == [
        ([[0, 4], [0, 6]], [0, 1], 2),
        ([[4, 8], [0, 6]], [2, 3], 2),
    ]
    assert a["sharding"]["replicated_over"] == ["y"]
    assert not a["fully_replicated"]


def test_describe_multi_axis_spec(desc: dict[str, Any]) -> None:
    a = desc["flat"]
    assert a["sharding"]["spec"] == [["x", "y"]]
    assert [b["index"] for b in a["blocks"]] == [[[0, 2]], [[2, 4]], [[4, 6]], [[6, 8]]]
    assert a["axes"][0]["by"] == ["x", "y"] and a["axes"][0]["shards"] == 4


def test_describe_rank3_summary(desc: dict[str, Any]) -> None:
    a = desc["r3"]
    assert a["axes"] == [
        {"axis": 0, "size": 4, "shards": 2, "block": 2, "by": ["x"]},
        {"axis": 1, "size": 6, "shards": 1, "block": 6, "by": "replicated"},
        {"axis": 2, "size": 8, "shards": 2, "block": 4, "by": ["y"]},
    ]
    assert len(a["blocks"]) == 4


def test_describe_other_shardings(desc: dict[str, Any]) -> None:
    single, scalar = desc["single"], desc["scalar"]
    assert single["sharding"]["type"] == "SingleDeviceSharding"
    assert "spec" not in single["sharding"] and single["sharding"]["repr"]
    assert single["blocks"] == [
        {"index": [[0, 3]], "devices": [0], "process_indices": [0], "replicas": 1}
    ]
    assert scalar["shape"] == [] and scalar["blocks"][0]["index"] == []
    assert scalar["blocks"][0]["devices"] == [0, 1, 2, 3]


def test_describe_never_reads_data(desc: dict[str, Any]) -> None:
    # A deleted array has no data left, only its sharding: describing it still works.
    assert desc["deleted"]["blocks"] == desc["a2"]["blocks"]


def test_describe_rejects_other_types(desc: dict[str, Any]) -> None:
    errors = desc["errors"]
    assert set(errors) == {"int", "numpy", "tracer"}
    assert "builtins.int" in errors["int"] and "jax.sharding.Mesh or a jax.Array" in errors["int"]
    assert "numpy.ndarray" in errors["numpy"]
    assert "traced" in errors["tracer"]
    assert all("\n" not in msg for msg in errors.values())


def test_show_helpers_display_bundles(desc: dict[str, Any]) -> None:
    shown = desc["shown"]  # outside IPython: the readable text, not the repr of a MIME bundle
    assert "Mesh mesh2 x=2, y=2 (4 devices, 1 process)" in shown and "Array w " in shown
    assert "text/html" not in shown and "x=1    2 [p0]  3 [p0]" in shown


# -- rendering (kernel side) ------------------------------------------------


def test_mesh_html_1d(desc: dict[str, Any]) -> None:
    html = mesh_html(desc["mesh1"])
    assert "x=4" in html and "4 devices, 1 process)" in html
    for j in range(4):
        assert f"x={j}</th>" in html and f"<b>{j}</b>" in html
    assert html.count(process_colour(0)) >= 5  # four cells and the legend
    assert f"process 0 — {desc['mesh1']['processes'][0]['host']}" in html


def test_mesh_html_2d(desc: dict[str, Any]) -> None:
    html = mesh_html({**desc["mesh2"], "name": "m"})
    assert "Mesh <code>m</code>" in html and "x=2, y=2" in html
    assert "x \\ y" in html and "x=1</th>" in html and "y=1</th>" in html
    # Row-major device layout: row x=0 holds devices 0 and 1.
    row0 = html.split("x=0</th>", 1)[1].split("</tr>", 1)[0]
    assert "<b>0</b>" in row0 and "<b>1</b>" in row0 and "<b>2</b>" not in row0


def test_mesh_html_colours_by_process(desc: dict[str, Any]) -> None:
    m = json.loads(json.dumps(desc["mesh2"]))
    for j, d in enumerate(m["devices"][1]):  # pretend row x=1 lives on process 1
        d["process_index"] = 1
        d["host"] = None
        m["devices"][1][j] = d
    m["processes"] = [{"index": 0, "host": "a"}, {"index": 1, "host": None}]
    html = mesh_html(m)
    assert process_colour(0) != process_colour(1)
    assert html.count(process_colour(1)) == 3  # two cells and the legend
    assert "process 1 — host ?" in html and "2 processes" in html


def test_sharding_html_1d(desc: dict[str, Any]) -> None:
    html = sharding_html(desc["a1"])
    assert "(8,) float32" in html and "P('x')" in html and "mesh <code>x=4</code>" in html
    for start, dev in [(0, 0), (2, 1), (4, 2), (6, 3)]:
        cell = html.split(f"[{start}:{start + 2}]", 1)[1].split("</td>", 1)[0]
        assert f">{dev}</span>" in cell


def test_sharding_html_2d(desc: dict[str, Any]) -> None:
    html = sharding_html({**desc["a2"], "name": "w"})
    assert "Array <code>w</code>" in html and "P('x', 'y')" in html
    assert "rows \\ cols" in html and "0:4</th>" in html and "3:6</th>" in html
    cell = html.split("[4:8, 3:6]", 1)[1].split("</td>", 1)[0]
    assert ">3</span>" in cell and ">2</span>" not in cell


def test_sharding_html_replicated(desc: dict[str, Any]) -> None:
    html = sharding_html(desc["rep"])
    assert "P(None, None)" in html and "replicated over <code>x, y</code>" in html
    assert "(fully replicated)" in html and "(4 copies)" in html
    cell = html.split("[0:4, 0:4]", 1)[1].split("</td>", 1)[0]
    assert all(f">{i}</span>" in cell for i in range(4))


def test_sharding_html_partially_replicated(desc: dict[str, Any]) -> None:
    html = sharding_html(desc["part"])
    assert "P('x', None)" in html and "replicated over <code>y</code>" in html
    top = html.split("[0:4, 0:6]", 1)[1].split("</td>", 1)[0]
    bottom = html.split("[4:8, 0:6]", 1)[1].split("</td>", 1)[0]
    assert ">0</span>" in top and ">1</span>" in top and "(2 copies)" in top
    assert ">2</span>" in bottom and ">3</span>" in bottom


def test_sharding_html_rank3(desc: dict[str, Any]) -> None:
    html = sharding_html(desc["r3"])
    assert "(4, 6, 8) float32" in html and "P('x', None, 'y')" in html
    assert "sharded by</th>" in html and "rows \\ cols" not in html
    assert ">replicated</td>" in html and ">x</td>" in html and ">y</td>" in html
    assert "[2:4, 0:6, 4:8]" in html


def test_sharding_html_other_shardings(desc: dict[str, Any]) -> None:
    html = sharding_html(desc["single"])
    assert "SingleDeviceSharding" in html and "[0:3]" in html
    html = sharding_html(desc["scalar"])
    assert "() float32" in html and "[]" in html


def test_widgets_and_show(desc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    import ipywidgets as widgets

    for make, d in [(mesh_widget, desc["mesh2"]), (sharding_widget, desc["r3"])]:
        w = make(d)
        assert isinstance(w, widgets.VBox) and len(w.children) == 2
        assert all(isinstance(c, widgets.HTML) for c in w.children)
    bundle = widget_bundle(mesh_widget(desc["mesh2"]), mesh_html(desc["mesh2"]))
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "x=2" in bundle["text/plain"]

    show(desc["a2"])  # no IPython shell here: display() prints the bundle
    assert "P('x', 'y')" in capsys.readouterr().out
    with pytest.raises(ValueError, match="kind"):
        show({"kind": "other"})


def test_renderer_does_not_import_jax(desc: dict[str, Any]) -> None:
    code = (
        "import json, sys; import jaxnb; before = set(sys.modules)\n"
        "from jaxnb._widgets import mesh_view\n"
        "d = json.loads(sys.stdin.read())\n"
        "mesh_view.mesh_html(d['mesh2']); mesh_view.sharding_html(d['r3'])\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'jax'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(desc),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
