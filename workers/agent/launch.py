"""Starting an agent: in this thread (run_agent), in a thread of this process (`paretune up`'s
local worker in tests), or as a process of its own that reads its settings on stdin."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from workers.agent.loop import Agent, AgentSummary
from workers.agent.settings import SETTINGS_ON_STDIN, AgentSettings

log = logging.getLogger("paretune.worker")


def run_agent(settings: AgentSettings, stop_event: threading.Event | None = None) -> AgentSummary:
    """Run a worker agent until stop_event is set (then drain) or max_trials are done.
    Safe to call from any thread (it installs no signal handlers)."""
    return Agent(settings, stop_event).run()


class AgentThread:
    """A worker agent in a background thread of this process."""

    def __init__(self, settings: AgentSettings) -> None:
        self.stop_event = threading.Event()
        self.summary: AgentSummary | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(settings,), name="paretune-worker", daemon=True)

    def _run(self, settings: AgentSettings) -> None:
        try:
            self.summary = run_agent(settings, self.stop_event)
        except BaseException as exc:
            self.error = exc
            log.error("the local worker stopped: %s", exc)

    def start(self) -> AgentThread:
        self.thread.start()
        return self

    def stop(self, timeout: float | None = 60.0) -> AgentSummary | None:
        self.stop_event.set()
        self.thread.join(timeout)
        return self.summary


def start_agent_thread(settings: AgentSettings) -> AgentThread:
    return AgentThread(settings).start()


def start_agent_process(settings: AgentSettings, log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """A worker agent as a child process (`python -m workers`): its settings, the token
    with them, travel as JSON through its stdin, never its command line or environment.
    Stop it with SIGTERM (drain) and wait()."""
    env = {k: v for k, v in os.environ.items() if k != "PARETUNE_WORKER_TOKEN"}
    output = log_path.open("ab") if log_path else None
    process = subprocess.Popen([sys.executable, "-m", "workers", SETTINGS_ON_STDIN], env=env, stdout=output,
                               stderr=subprocess.STDOUT if output else None, stdin=subprocess.PIPE)
    assert process.stdin is not None
    process.stdin.write(settings.launch_json().encode() + b"\n")
    process.stdin.close()
    return process
