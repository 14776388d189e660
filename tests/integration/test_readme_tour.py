"""The README's five-minute tour, run as written against a real daemon (tests/shell_docs.py says
how its comments are checked: `# 403`, the outputs under the commands).

The daemon runs on a deployment laid out like the checkout after `make run` (the development
section, `.venv/bin/apid`, mails in `var/outbox/`); `B` is set to its address. Its `.venv` is
layered over the checkout's (tests/shell_docs.py `layered_venv`), so the plugin the tour makes
and installs stays out of the rest of the suite; pip builds it offline. The tour's later
sections ask for two switches, `webhookActive` and `apiThrottle`, and a restart: they are on
from the start, which changes nothing the earlier sections show.
"""

from __future__ import annotations

from harness import REPO, Daemon
from shell_docs import OFFLINE_PIP, check, checkout_like, fenced_blocks, layered_venv, run_steps, section, steps

TOUR = "## A five-minute tour"


def tour_steps():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tour = section(readme, TOUR)
    first_line = readme[: readme.index(tour)].count("\n")
    return [step for start, block in fenced_blocks(tour) for step in steps(block, first_line + start)]


def test_the_tour_has_no_placeholders_left():
    for step in tour_steps():
        assert "<" not in step.command.replace("<<", ""), f"README.md:{step.line}: a placeholder: {step.command}"


def test_the_five_minute_tour_runs_as_written(tmp_path):
    python = layered_venv(tmp_path / ".venv")
    deployment = checkout_like(tmp_path, server={"webhookActive": True, "apiThrottle": True}, venv=None)
    all_steps = tour_steps()
    daemon = Daemon(deployment, python=str(python)).start()
    try:
        ran = run_steps(all_steps, tmp_path, {"B": f"http://127.0.0.1:{daemon.port}", **OFFLINE_PIP})
    finally:
        daemon.stop()
    check(ran, len(all_steps), "README.md")
