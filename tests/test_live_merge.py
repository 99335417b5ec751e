"""Live merging of N processes' streams and the live panel (pure logic, no engines)."""

from jaxnb._cells.live import LiveMerger, collapse
from jaxnb._cells.live_panel import LivePanel


class Page:
    """What a merger writes to the page."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def __call__(self, text: str) -> None:
        self.writes.append(text)

    @property
    def text(self) -> str:
        return "".join(self.writes)


def merger(processes=(0, 1), **kw):
    page = Page()
    return LiveMerger(list(processes), page, **kw), page


class Printer:
    """Feeds a merger as the engines' accumulated stdout grows."""

    def __init__(self, m: LiveMerger):
        self.m = m
        self.so_far = {p: "" for p in m.processes}

    def __call__(self, p: int, text: str) -> None:
        self.so_far[p] += text
        self.m.feed(p, self.so_far[p])


def test_collapse_keeps_what_a_terminal_shows():
    assert collapse("a\rb\rc") == "c"
    assert collapse("step 1\rstep 2\r") == "step 2"
    assert collapse("plain") == "plain"
    assert collapse("\r 40%|####") == " 40%|####"


def test_differing_lines_show_live_labelled_before_the_cell_ends():
    m, page = merger()
    say = Printer(m)
    say(0, "step 0 loss 1.0\n")
    say(1, "step 0 loss 0.5\n")
    assert m.view() == "[p0] step 0 loss 1.0\n[p1] step 0 loss 0.5\n"
    assert page.text == ""
    m.finish()
    assert page.text == "[p0] step 0 loss 1.0\n[p1] step 0 loss 0.5\n"


def test_a_lagging_process_does_not_hold_back_the_others_and_merges_when_it_catches_up():
    m, page = merger()
    say = Printer(m)
    say(0, "same 0\n")
    say(0, "same 1\n")
    assert m.view() == "[p0] same 0\n[p0] same 1\n"  # p0 shown at once, though p1 is silent
    say(1, "same 0\n")
    assert page.text == "same 0\n"  # lined up: written once, as ordinary output
    assert m.view() == "[p0] same 1\n"
    say(1, "same 1\n")
    assert page.text == "same 0\nsame 1\n"
    assert m.view() == ""


def test_identical_lines_after_a_difference_lose_their_label_when_they_line_up():
    m, page = merger()
    say = Printer(m)
    say(0, "x=0\nsame\n")
    say(1, "x=1\n")
    assert m.view() == "[p0] x=0\n[p0] same\n[p1] x=1\n"
    say(1, "same\n")
    assert m.view() == "[p0] x=0\nsame\n[p1] x=1\n"
    m.finish()  # today's tidy form: after the first difference, each process's own lines
    assert page.text == "[p0] x=0\n[p0] same\n[p1] x=1\n[p1] same\n"


def test_carriage_return_progress_updates_in_place_per_process():
    m, page = merger()
    say = Printer(m)
    for i in range(1, 4):
        say(0, f"\r{i}/5")
    say(1, "\r1/5")
    assert m.view() == "[p0] 3/5\n[p1] 1/5\n"
    say(1, "\r3/5")
    assert m.view() == "3/5\n"  # both bars agree: shown once
    say(0, "\r5/5\n")
    say(1, "\r4/5")
    assert m.view() == "[p0] 5/5\n[p1] 4/5\n"
    say(1, "\r5/5\n")
    assert page.text == "5/5\n"  # the finished bars agree: one line, no \r pile-up
    m.finish()
    assert page.text == "5/5\n"


def test_print_end_carriage_return_keeps_only_the_last_state_at_the_end():
    m, page = merger()
    say = Printer(m)
    for i in range(3):
        say(0, f"step {i}\r")
        say(1, f"step {i * 2}\r")
    assert m.view() == "[p0] step 2\n[p1] step 4\n"
    m.finish()
    assert page.text == "[p0] step 2\n[p1] step 4\n"


def test_flood_keeps_a_bounded_view_and_a_bounded_page_with_a_note():
    saved = {}

    def save_log(texts):
        saved.update(texts)
        return "/logs/p*.stdout.txt"

    m, page = merger(page_lines=100, view_lines=10, save_log=save_log)
    say = Printer(m)
    for chunk in range(10):
        for p in (0, 1):
            say(p, "".join(f"p{p} line {chunk * 1000 + i}\n" for i in range(1000)))
    view = m.view().splitlines()
    assert len(view) == 11
    assert view[0].startswith("... ") and "lines not shown while the cell runs" in view[0]
    assert view[-1] == "[p1] p1 line 9999"
    m.finish()
    lines = page.text.splitlines()
    assert lines[0] == (
        "[jaxnb] 19,900 lines of output not shown; each process's full output: /logs/p*.stdout.txt"
    )
    assert len(lines) == 101
    assert lines[-1] == "[p1] p1 line 9999"
    assert saved[0].count("\n") == 10_000 and saved[1].count("\n") == 10_000


def test_identical_flood_streams_up_to_the_page_limit_then_keeps_the_tail():
    m, page = merger(page_lines=100, view_lines=10, save_log=lambda texts: "LOG")
    say = Printer(m)
    for p in (0, 1):
        say(p, "".join(f"line {i}\n" for i in range(1000)))
    assert page.text.splitlines()[-1] == "line 49"  # written live while they agree
    m.finish()
    lines = page.text.splitlines()
    assert len(lines) == 101
    assert lines[49] == "line 49"
    assert lines[50] == "[jaxnb] 900 lines of output not shown; each process's full output: LOG"
    assert lines[51] == "line 950" and lines[-1] == "line 999"


def test_partial_identical_output_is_written_once_without_a_newline():
    m, page = merger()
    say = Printer(m)
    say(0, "abc")
    say(1, "abc")
    assert m.view() == "abc\n"
    m.finish()
    assert page.text == "abc"


def test_output_of_one_process_only_is_labelled():
    m, page = merger()
    Printer(m)(0, "only me\n")
    m.finish()
    assert page.text == "[p0] only me\n"


class Screen:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def show(self, text: str) -> None:
        self.calls.append(("show", text))

    def update(self, text: str) -> None:
        self.calls.append(("update", text))


def test_panel_appears_after_the_grace_updates_at_most_every_interval_and_empties():
    now = [0.0]
    text = [""]
    screen = Screen()
    panel = LivePanel([lambda: text[0]], screen, grace=0.25, interval=0.1, clock=lambda: now[0])
    panel.tick()
    text[0] = "[p0] a\n"
    panel.tick()
    now[0] = 0.2
    panel.tick()
    assert screen.calls == []  # a short cell whose output lines up never shows a panel
    now[0] = 0.3
    panel.tick()
    assert screen.calls == [("show", "[p0] a\n")]
    text[0] = "[p0] a\n[p1] b\n"
    now[0] = 0.35
    panel.tick()
    assert len(screen.calls) == 1
    now[0] = 0.41
    panel.tick()
    assert screen.calls[-1] == ("update", "[p0] a\n[p1] b\n")
    panel.close()
    assert screen.calls[-1] == ("update", "")


def test_panel_never_appears_when_the_view_empties_within_the_grace():
    now = [0.0]
    text = ["[p0] a\n"]
    screen = Screen()
    panel = LivePanel([lambda: text[0]], screen, grace=0.25, clock=lambda: now[0])
    for step in range(20):
        now[0] = step * 0.1
        text[0] = "[p0] a\n" if step % 2 else ""
        panel.tick()
    panel.close()
    assert screen.calls == []


def test_text_rewritten_by_ipyparallels_carriage_return_collapse_is_followed():
    m, page = merger()
    m.feed(0, "x\r")
    m.feed(0, "x\ry\n")
    m.feed(0, "y\nz")  # ipyparallel removed "x\r" from the first line and collapsed "\rz"
    m.feed(1, "y\nz")
    assert page.text == "y\n"
    assert m.view() == "z\n"
    m.feed(0, "y\nz\nw\n")
    m.feed(1, "y\nz\nw\n")
    assert page.text == "y\nz\nw\n"
