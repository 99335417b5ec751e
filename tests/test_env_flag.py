"""``%jax_cluster start --env NAME=VALUE`` / ``--env NAME``: every engine gets the variable (on
this machine in a real kernel, and over ssh on the lab), the names are checked, and the values
are never shown: not in what start, status, restart or an error print."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jaxnb import JaxCluster
from jaxnb._core.options import ClusterOptions, OptionError
from jaxnb.magics.accept import variable

SECRET = "hunter2-a1b2c3"  # what a key looks like: it must never be printed
FROM_KERNEL = "kernel-value-9f8e"

READ = """%%jax_cluster
import os
print(os.environ.get("JAXNB_T_KEY") == "hunter2-a1b2c3",
      os.environ.get("JAXNB_T_KERNEL") == "kernel-value-9f8e",
      os.environ.get("JAXNB_T_EMPTY") == "")
"""


def test_the_flag_takes_name_value_or_a_name_from_this_kernel(monkeypatch):
    parse = variable("--env")
    assert parse("NCCL_DEBUG=WARN") == ("NCCL_DEBUG", "WARN")
    assert parse("A=b=c") == ("A", "b=c") and parse("EMPTY=") == ("EMPTY", "")
    assert parse('"X=two words"') == ("X", "two words")  # IPython keeps the quotes
    monkeypatch.setenv("JAXNB_T_KERNEL", FROM_KERNEL)
    assert parse("JAXNB_T_KERNEL") == ("JAXNB_T_KERNEL", FROM_KERNEL)


@pytest.mark.parametrize("text, says", [
    (f"1BAD={SECRET}", "'1BAD' is not a variable name"),
    (f"BAD-NAME={SECRET}", "'BAD-NAME' is not a variable name"),
    (SECRET, "what it was given is not a variable name"),  # a value pasted alone: not echoed
    ("JAXNB_T_NOT_SET_ANYWHERE", "JAXNB_T_NOT_SET_ANYWHERE is not set in this kernel"),
])
def test_a_wrong_entry_is_one_line_that_never_holds_the_value(text, says):
    with pytest.raises(UsageError) as caught:
        variable("--env")(text)
    message = str(caught.value)
    assert says in message and SECRET not in message and "\n" not in message


def test_the_options_never_show_the_values():
    options = ClusterOptions(env=[("JAXNB_T_KEY", SECRET), ("A", "1")])
    assert options.env == (("A", "1"), ("JAXNB_T_KEY", SECRET))
    assert SECRET not in repr(options) and SECRET not in str(options)
    with pytest.raises(OptionError) as caught:
        ClusterOptions(env={"BAD NAME": SECRET})
    assert SECRET not in str(caught.value)


@pytest.mark.timeout(300)
def test_engines_started_by_the_magic_get_the_variables_and_nothing_shows_them(make_kernel):
    k = make_kernel(None, "import jaxnb", env={"JAXNB_T_KERNEL": FROM_KERNEL})
    started = k.ok(f"%jax_cluster start -n 2 --env JAXNB_T_KEY={SECRET} --env JAXNB_T_KERNEL "
                   "--env JAXNB_T_EMPTY=")
    assert k.ok(READ).stdout.split() == ["True", "True", "True"]  # identical on both: shown once
    status = k.ok("%jax_cluster status")
    restarted = k.ok("%jax_cluster restart")  # the same flags as the last start
    assert k.ok(READ).stdout.split() == ["True", "True", "True"]
    failed = k.run(f"%jax_cluster start --env 9X={SECRET}")
    assert "UsageError: --env takes NAME=VALUE or NAME, and '9X' is not a variable name" in failed.stderr
    said = started.shown + status.shown + restarted.shown + failed.shown + k.ok("%jax_cluster stop").shown
    assert SECRET not in said and FROM_KERNEL not in said


@pytest.mark.timeout(300)
def test_engines_over_ssh_get_the_variables(make_lab):
    lab = make_lab(1)
    cluster = JaxCluster(hosts=lab.addresses[:1], env={"JAXNB_T_KEY": SECRET, "JAXNB_T_EMPTY": "",
                                                       "JAXNB_T_KERNEL": FROM_KERNEL})
    try:
        cluster.start()
        cluster.run(READ.split("\n", 1)[1].replace("print(", "found = ("))
        assert cluster.pull("found") == (True, True, True)
        assert SECRET not in repr(cluster.status()) and SECRET not in repr(cluster.options)
    finally:
        cluster.stop()
