"""Old code a bench or a test compares today's with, read from its commit at run time
(``git show``) rather than kept as a copy in the tree.

:func:`old_communities` is ``graph/communities.py`` as it was at 02ef80d, before issue 22
part 4a (leidenalg per split, Python subgraph rebuilds, a pure-Python ``entity_edges``):
``bench/community_scale.py`` times it beside today's builder, and
``tests/test_graph_community_scale.py`` checks today's ``entity_edges`` against it bit for
bit. Where git or the commit is missing (a shallow clone, a copy without history)
:class:`FrozenUnavailable` says so: the test skips with that reason, the bench stops.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# The old community builder; its relative imports (``..errors``, ``.model``) still resolve in
# today's rcp_agentic.graph.
OLD_COMMUNITIES = ("02ef80d6de7c480200b7ccf3e0fb8bd44bcd95ab", "graph/communities.py",
                   "rcp_agentic.graph")


class FrozenUnavailable(RuntimeError):
    """The old file cannot be read: no git, not a checkout, or the commit is not in it."""


def from_commit(commit: str, path: str, package: str) -> ModuleType:
    """``path`` as it was at ``commit``, run as a module whose relative imports resolve in
    ``package``; loaded once per process (kept in ``sys.modules``)."""
    name = f"frozen_{Path(path).stem}_{commit[:7]}"
    if name in sys.modules:
        return sys.modules[name]
    where = f"{path} at commit {commit[:7]}"
    try:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
                               capture_output=True, check=False)
    except OSError as exc:
        raise FrozenUnavailable(f"cannot read {where}: git did not run ({exc})") from None
    if shown.returncode != 0:
        why = shown.stderr.decode("utf-8", "replace").strip()
        raise FrozenUnavailable(f"cannot read {where} (a shallow clone, or a copy without the "
                                f"project's git history?): {why}")
    module = ModuleType(name)
    module.__file__ = f"{commit[:7]}:{path}"
    module.__package__ = package
    sys.modules[name] = module  # dataclasses look their module up while the code runs
    try:
        exec(compile(shown.stdout, module.__file__, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def old_communities() -> ModuleType:
    """The community builder before issue 22 part 4a (module doc)."""
    return from_commit(*OLD_COMMUNITIES)
