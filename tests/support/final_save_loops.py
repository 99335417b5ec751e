"""Loops a user ports from Ray Train, as they write them, with a save after the loop.

``ray_final_save``: Ray's shape (report every step, never ``should_stop()``), the final save in
the loop's ``finally:``. ``polling_final_save``: the ``should_stop()`` idiom, the final save on
the line after the loop. Both save ``{"w": step}`` at the end only; each process appends one
JSON line to ``f"{config['log']}.{rank}"`` saying what ran (``finally``, ``after_loop``).
"""

#: Run in the notebook: the loops are sent to the engines with each run.
LOOPS = '''
def ray_final_save(config):
    import json, time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    rank = jaxnb.get_context().get_world_rank()
    ran = {"finally": False, "after_loop": False}
    step = 0
    try:
        for step in range(1, config["steps"] + 1):
            multihost_utils.process_allgather(jnp.ones(1))
            jaxnb.report({"step": step, "loss": 1.0 / step})
            if step == 3:
                open(config["flag"], "a").close()
            time.sleep(0.02)
        ran["after_loop"] = True
    finally:
        jaxnb.report({"step": step, "loss": 1.0 / step, "final": 1}, checkpoint={"w": step})
        ran["finally"] = True
        with open(f"{config['log']}.{rank}", "a") as f:
            f.write(json.dumps({"last": step, **ran}) + "\\n")


def polling_final_save(config):
    import json, time
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    import jaxnb
    rank = jaxnb.get_context().get_world_rank()
    step = 0
    for step in range(1, config["steps"] + 1):
        if jaxnb.should_stop():
            break
        multihost_utils.process_allgather(jnp.ones(1))
        jaxnb.report({"step": step, "loss": 1.0 / step})
        if step == 3:
            open(config["flag"], "a").close()
        time.sleep(0.02)
    jaxnb.report({"step": step, "loss": 1.0 / step, "final": 1}, checkpoint={"w": step})
    with open(f"{config['log']}.{rank}", "a") as f:
        f.write(json.dumps({"last": step, "finally": False, "after_loop": True}) + "\\n")
'''
