"""Per-process noise and the page cap in the merged stream (pure logic, recorded text, no engines)."""

from test_live_merge import Printer, merger

from jaxnb._cells.live_noise import is_noise, noise_key, split_noise

#: gloo's C++ lines as two processes with two CPU devices each print them on stdout
#: (recorded with `JaxCluster(2, devices_per_process=2)` and a pmap psum), in any order.
_G = "[Gloo] Rank {} is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"
GLOO = {0: [_G.format(0), _G.format(1)], 1: [_G.format(3), _G.format(2)]}
#: A Python warning raised in a cell: the engine's cell file holds its pid (recorded).
WARNING = {
    0: ["/tmp/ipykernel_30544/2143214470.py:5: UserWarning: careful",
        "  warnings.warn('careful')"],
    1: ["/tmp/ipykernel_30542/2143214470.py:5: UserWarning: careful",
        "  warnings.warn('careful')"],
}


def test_noise_is_recognised_and_keyed_without_its_numbers():
    assert all(is_noise(line) for line in GLOO[0] + GLOO[1])
    assert is_noise(WARNING[0][0]) and not is_noise(WARNING[0][1])
    assert noise_key(WARNING[0][0]) == noise_key(WARNING[1][0])
    assert not is_noise("step 3 loss 0.5") and not is_noise("[p0] Gloo")
    assert split_noise(["a", *WARNING[0], "  b"]) == (["a", "  b"], WARNING[0])


def test_gloo_and_warnings_do_not_break_the_merge_of_identical_user_lines():
    m, page = merger()
    say = Printer(m)
    say(0, "start\n" + "\n".join(GLOO[0]) + "\nsame 1\n")
    say(1, "start\n" + GLOO[1][0] + "\nsame 1\n" + GLOO[1][1] + "\n")  # another order
    say(0, "\n".join(WARNING[0]) + "\nsame 2\n")
    say(1, "\n".join(WARNING[1]) + "\nsame 2\n")
    m.finish()
    lines = page.text.splitlines()
    assert [x for x in lines if not is_noise(x) and not x.startswith("  ")] == ["start", "same 1", "same 2"]
    assert not any(x.startswith("[p") for x in lines), page.text
    assert sum(x.startswith("[Gloo]") for x in lines) == 0  # in the engine's log, not here
    assert sum("UserWarning: careful" in x for x in lines) == 1
    assert lines.count("  warnings.warn('careful')") == 1


def test_the_cap_comes_after_merging_and_keeps_every_processs_last_line():
    # for i in range(1500): print(i); print('last', jax.process_index())
    m, page = merger(save_log=lambda texts: "LOG")
    say = Printer(m)
    for p in (0, 1):
        say(p, "".join(f"{i}\n" for i in range(1500)) + f"last {p}\n")
    m.finish()
    lines = page.text.splitlines()
    assert lines[-2:] == ["[p0] last 0", "[p1] last 1"]
    assert not any(x.startswith("[p") for x in lines[:-2])  # shared lines are not labelled
    assert lines[:1500] == [str(i) for i in range(1500)] and len(lines) == 1502
    assert "not shown" not in page.text


def test_a_capped_page_keeps_each_processs_tail_after_one_note():
    m, page = merger(page_lines=100, save_log=lambda texts: "LOG")
    say = Printer(m)
    for p in (0, 1):
        say(p, "".join(f"{i}\n" for i in range(1000)) + "".join(f"p{p} own {i}\n" for i in range(300)))
    m.finish()
    lines = page.text.splitlines()
    assert lines[50].startswith("[jaxnb] ") and "lines of output not shown" in lines[50]
    assert lines[-1] == "[p1] p1 own 299" and "[p0] p0 own 299" in lines
    assert sum(x.startswith("[p0]") for x in lines) == sum(x.startswith("[p1]") for x in lines) == 25
    assert len(lines) == 101


def test_all_shows_each_process_in_full_but_leaves_informational_cxx_lines_in_the_log():
    from jaxnb._cells.outputs import write_raw

    shown: list[str] = []
    texts = {0: "start\n" + "\n".join(GLOO[0]) + "\nend", 1: GLOO[1][0] + "\n", 2: "2.0\n"}
    write_raw([0, 1, 2], texts, shown.append)
    assert "".join(shown) == "[p0]\nstart\nend\n[p2]\n2.0\n"
