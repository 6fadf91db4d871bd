"""The demo: a two-step arithmetic task small enough to train on a laptop CPU, its tiny policy and reward
model, and `coreward demo`, which trains every reward method from the same warm start and compares them.

Importing the package registers how the `demo` asset is found or rebuilt, and the names of the demo RM's ensemble
members (`demo:1` ...) and of their data-matched single RM (`demo:pooled`), built on first use (see `coreward.runtime.assets`).
"""

from coreward.runtime.assets import register_builder


def _policy():
    from coreward.demo.policy import ensure_demo_policy

    return ensure_demo_policy()


def _rm():
    from coreward.demo.rm import ensure_demo_rm

    return ensure_demo_rm()


ENSEMBLE_MEMBERS = 4  # the demo RM's ensemble members that can be named: demo:1 ... demo:4 (coreward.demo.rm)


def _member(k: int | str):
    def build():
        from coreward.demo.rm import ensure_demo_rm_member

        return ensure_demo_rm_member(k)

    return build


register_builder("demo", "policy", _policy)
register_builder("demo", "rm", _rm)
def _member_build_s(k: int | str):
    def build_s():
        from coreward.demo.rm import member_build_s

        return member_build_s(k)

    return build_s


BUILD_AHEAD = "python -m coreward.demo.rm ensemble"  # + names: builds those missing, prints each one's figures
for _k in range(1, ENSEMBLE_MEMBERS + 1):  # built on first use, cached like the demo RM; a run announces the builds
    register_builder(f"demo:{_k}", "rm", _member(_k), build_s=_member_build_s(_k), ahead=BUILD_AHEAD)
# the data-matched single RM: demo, demo:1 and demo:2's questions pooled into one RM (coreward.demo.rm.POOLED)
register_builder("demo:pooled", "rm", _member("pooled"), build_s=_member_build_s("pooled"), ahead=BUILD_AHEAD)
