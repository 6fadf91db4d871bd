"""The demo: a two-step arithmetic task small enough to train on a laptop CPU, its tiny policy and reward
model, and `coreward demo`, which trains every reward method from the same warm start and compares them.

Importing the package registers how the `demo` asset is found or rebuilt (see `coreward.runtime.assets`).
"""

from coreward.runtime.assets import register_builder


def _policy():
    from coreward.demo.policy import ensure_demo_policy

    return ensure_demo_policy()


def _rm():
    from coreward.demo.rm import ensure_demo_rm

    return ensure_demo_rm()


register_builder("demo", "policy", _policy)
register_builder("demo", "rm", _rm)
