"""Merging of N processes' text streams (pure logic, no engines): the tidy form."""

from jaxnb._cells.live import LiveMerger


def merged(texts: dict[int, list[str]]) -> str:
    written: list[str] = []
    merger = LiveMerger(sorted(texts), written.append)
    so_far = {p: "" for p in texts}
    for step in range(max(len(v) for v in texts.values())):
        for p, chunks in texts.items():
            if step < len(chunks):
                so_far[p] += chunks[step]
                merger.feed(p, so_far[p])
    merger.finish()
    return "".join(written)


def test_identical_lines_are_written_once():
    assert merged({0: ["a\n", "b\n"], 1: ["a\n", "b\n"]}) == "a\nb\n"


def test_differing_lines_are_labelled_per_process():
    out = merged({0: ["same\n", "x=0\n"], 1: ["same\n", "x=1\n"]})
    assert out == "same\n[p0] x=0\n[p1] x=1\n"


def test_output_of_one_process_only_is_labelled():
    assert merged({0: ["only me\n"], 1: []}) == "[p0] only me\n"


def test_common_lines_are_released_before_the_end():
    written: list[str] = []
    merger = LiveMerger([0, 1], written.append)
    merger.feed(0, "step 1\n")
    assert written == []
    merger.feed(1, "step 1\nstep 2\n")
    assert written == ["step 1\n"]


def test_partial_lines_wait_for_their_newline():
    written: list[str] = []
    merger = LiveMerger([0, 1], written.append)
    merger.feed(0, "abc")
    merger.feed(1, "abc")
    assert written == []
    merger.finish()
    assert written == ["abc"]
