"""docs/getting-started.md and docs/concepts.md, run as a newcomer runs them: their example
scripts (docs/examples/*.sh, which the pages show verbatim: tests/unit/test_docs_examples.py)
against a real daemon, in a deployment laid out like a checkout after `make run`.

The plugin is installed with the scripts' own `.venv/bin/pip install -e`, into a virtualenv
layered over the checkout's (tests/shell_docs.py `layered_venv`), so the rest of the suite never
sees it; pip builds it offline with the build backend of the test extra.
"""

from __future__ import annotations

import shutil

from harness import REPO, Daemon
from shell_docs import OFFLINE_PIP, check, checkout_like, layered_venv, run_steps, steps

EXAMPLES = REPO / "docs" / "examples"
BEFORE_THE_PLUGIN = ("first-steps.sh", "install-plugin.sh")
WITH_THE_PLUGIN = ("call-plugin.sh", "concepts.sh")


def test_every_example_script_is_run_here():
    assert sorted(path.name for path in EXAMPLES.glob("*.sh")) == sorted(BEFORE_THE_PLUGIN + WITH_THE_PLUGIN)


def run_example(name: str, root, daemon: Daemon) -> None:
    script = (EXAMPLES / name).read_text(encoding="utf-8")
    all_steps = steps(script)
    ran = run_steps(all_steps, root, {"B": f"http://127.0.0.1:{daemon.port}", **OFFLINE_PIP})
    check(ran, len(all_steps), f"docs/examples/{name}")


def test_getting_started_reaches_a_first_plugin_and_the_concepts_examples_run(tmp_path):
    python = layered_venv(tmp_path / ".venv")
    deployment = checkout_like(tmp_path, venv=None)
    shutil.copytree(EXAMPLES, tmp_path / "docs" / "examples")  # the scripts' paths, out of the checkout

    daemon = Daemon(deployment, python=str(python)).start()  # `make run`
    try:
        for name in BEFORE_THE_PLUGIN:
            run_example(name, tmp_path, daemon)
    finally:
        daemon.stop()
    daemon = Daemon(deployment, python=str(python)).start()  # Ctrl-C, `make run` again
    try:
        for name in WITH_THE_PLUGIN:
            run_example(name, tmp_path, daemon)
    finally:
        daemon.stop()
