"""``--compile-cache`` without engines (milliseconds): the option's values, the folder each
host uses, and how ``%jax_cluster status`` shows the cache."""

from __future__ import annotations

import os

import pytest

from jaxnb._core.options import ClusterOptions, OptionError
from jaxnb._core.state import ProcessInfo
from jaxnb._engine.compile import cache
from jaxnb._hosts import site
from jaxnb._lifecycle import launch
from jaxnb._widgets.devices import cache_hits_text, devices_html
from jaxnb.magics import jax_cluster, kit


def test_the_option_takes_a_folder_off_or_nothing(tmp_path):
    assert ClusterOptions().compile_cache is None  # on, each host's default folder
    assert ClusterOptions(compile_cache="OFF").compile_cache == "off"
    assert ClusterOptions(compile_cache="~/xla").compile_cache == "~/xla"  # each host's home
    assert ClusterOptions(compile_cache="rel").compile_cache == os.path.abspath("rel")
    for wrong in ("", "  ", "a\nb", 3, False):
        with pytest.raises(OptionError, match=r"compile_cache= takes a folder or off, got .*; "
                                              r"e\.g\. compile_cache='/scratch/xla'"):
            ClusterOptions(compile_cache=wrong)


def test_the_flag_reads_its_text_and_reaches_the_engines_environment():
    args = jax_cluster.jax_cluster.parser.parse_argstring("start --compile-cache off")
    assert kit.given(args, "command", "replay") == {"compile_cache": "off"}
    for given, sent in ((None, ""), ("off", "off"), ("/scratch/xla", "/scratch/xla")):
        options = ClusterOptions(compile_cache=given)
        env = launch.engine_environment(options, "/tmp", site.for_options(options))
        assert env["JAXNB_COMPILE_CACHE"] == sent


def test_each_host_finds_its_folder(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    home = os.path.expanduser("~")
    assert cache.folder_from("") == os.path.join(home, ".cache", "jaxnb", "xla")
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/me")
    assert cache.folder_from(None) == "/var/cache/me/jaxnb/xla"
    assert cache.folder_from("off") is None
    assert cache.folder_from("~/x") == os.path.join(home, "x")


def _process(p: int, host: str, stats: dict | None) -> ProcessInfo:
    info = ProcessInfo(p, p, host, 100 + p, "cpu", [{"id": p, "kind": "cpu"}], 2)
    info.compile_cache = stats
    return info


def _stats(folder: str | None, hits: int = 3, lookups: int = 8, saved: float = 1.25) -> dict:
    return {"folder": folder, "entries": 12, "bytes": 3_400_000, "hits": hits, "lookups": lookups,
            "writes": 2, "saved_seconds": saved}


def test_status_shows_each_hosts_folder_and_each_process_hits():
    page = devices_html([_process(0, "a", _stats("/c")), _process(1, "a", _stats("/c", 0, 5, 0))])
    assert "compile cache hits" in page and "3 of 8 (1.2 s saved)" in page and "0 of 5" in page
    assert page.count("compile cache: /c — 12 entries, 3.4 MB") == 1  # one folder, shown once
    page = devices_html([_process(0, "a", _stats("/c")), _process(1, "b", _stats("/c"))])
    assert "compile cache on a: /c" in page and "compile cache on b: /c" in page
    page = devices_html([_process(0, "a", _stats(None))])
    assert "compile cache: off" in page and cache_hits_text(_stats(None)) == "off"
    assert cache_hits_text(None) == "—"  # the engines were busy: not known


def test_a_host_that_cannot_make_the_folder_says_so():
    problem = {**_stats(None), "problem": "/nonexistent/.cache/jaxnb/xla cannot be made: Permission denied"}
    page = devices_html([_process(0, "a", _stats("/c")), _process(1, "b", problem)])
    assert "compile cache on b: off (/nonexistent/.cache/jaxnb/xla cannot be made: Permission " \
           "denied; pass compile_cache=&#x27;DIR&#x27; with a folder it can write)" in page
    assert "compile cache on a: /c" in page


def test_hits_of_programs_compiled_in_under_a_second_save_nothing_not_less():
    # JAX stores compile times in whole seconds: such a hit reports minus its read time
    stats = cache.CacheStats()
    stats.on_duration(cache.SAVED_EVENT, -0.004)
    stats.on_duration(cache.SAVED_EVENT, 1.5)
    stats.on_duration("/jax/other", 9.0)
    assert stats.saved == 1.5
