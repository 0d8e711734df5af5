"""The `paretune` command line: run the service, a worker, and drive studies over HTTP."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import httpx
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from service.artifacts.cli import artifact_app, error_message
from service.cli_options import DEFAULT_SERVER, ServerOpt, TokenOpt
from service.controls.cli import acf_app
from service.workloads.cli import workload_app
from workers.cli import worker as run_worker_command
from workers.compilers.cli import toolchain_app

if TYPE_CHECKING:
    from service.config import Settings

app = typer.Typer(help="paretune: multi-objective Pareto tuning of GPU kernel configurations.",
                  no_args_is_help=True, add_completion=False)
study_app = typer.Typer(help="Create, list and follow studies.", no_args_is_help=True)
token_app = typer.Typer(help="Create API tokens (written to the database directly).", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(study_app, name="study")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")
app.add_typer(artifact_app, name="artifact")
app.add_typer(toolchain_app, name="toolchain")
app.add_typer(acf_app, name="acf")
app.add_typer(workload_app, name="workload")
console = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True, markup=True, highlight=False)
    raise typer.Exit(code)


def _settings() -> Settings:
    """The service's settings from the environment; a value that cannot be used ends the
    command with what its variable takes."""
    from service.config import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        _fail(str(exc))


class Api:
    """A small HTTP client that turns the API's error bodies into readable messages."""

    def __init__(self, server: str, token: str) -> None:
        if not token:
            _fail("no token: pass --token or set PARETUNE_TOKEN (`paretune token create` makes one)")
        self.client = httpx.Client(base_url=server.rstrip("/"), timeout=60,
                                   headers={"Authorization": f"Bearer {token}"})

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            _fail(f"cannot reach {self.client.base_url}: {exc}")
        if response.status_code >= 400:
            _fail(error_message(response))
        return response.json() if response.content else None


# --- service -------------------------------------------------------------------------

# What the control plane imports beyond the worker's dependencies: the `service` extra.
SERVICE_MODULES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "optuna", "redis", "prometheus_client")
SERVICE_COMMANDS = ("serve", "scheduler", "up", "db", "token")


@app.callback()
def _require_service_extras(ctx: typer.Context) -> None:
    """A worker-only install (`pip install paretune`) has none of the control plane's
    packages: say which extra brings them instead of failing on an import."""
    if ctx.invoked_subcommand not in SERVICE_COMMANDS:
        return
    missing = [name for name in SERVICE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        _fail(f"`paretune {ctx.invoked_subcommand}` runs the control plane, which this install lacks "
              f"({', '.join(missing)}): pip install 'paretune[service]'")


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
          processes: Annotated[int, typer.Option(
              min=1, help="server processes on this port, each a replica with its own scheduler (Postgres only)")] = 1,
          scheduler_process: Annotated[bool | None, typer.Option(
              "--scheduler-process/--no-scheduler-process",
              help="step the studies in a process of their own, restarted if it exits and stopped with the server "
              "(the default on Postgres unless PARETUNE_SCHEDULER_PROCESS=true says one runs elsewhere), or in the "
              "server processes (SQLite's only way)", show_default=False)] = None,
          ) -> None:
    """Run the control plane (PARETUNE_DATABASE_URL selects Postgres; SQLite otherwise)."""
    import uvicorn

    from service.app import create_app

    settings = _settings()
    if scheduler_process is None:
        scheduler_process = not (settings.is_sqlite or settings.scheduler_process)
    options: dict[str, Any] = {"host": host, "port": port, "log_level": log_level, "timeout_graceful_shutdown": 5,
                               "timeout_keep_alive": int(settings.keep_alive_s)}
    if settings.is_sqlite and (processes > 1 or scheduler_process):
        what = "--processes above 1" if processes > 1 else "--scheduler-process"
        _fail(f"{what} needs Postgres (PARETUNE_DATABASE_URL): SQLite has one writer at a time")
    if processes > 1:  # the processes share Postgres's connections (max_connections, 100 by default)
        os.environ.setdefault("PARETUNE_DB_POOL_SIZE", str(max(4, settings.db_pool_size // processes)))
    if (processes > 1 or scheduler_process) and settings.migrate_on_start:  # once here, not by every process
        from service.store.db import Database
        from service.store.migrate import upgrade

        db = Database(settings.database_url)
        upgrade(db.engine)
        db.dispose()  # the processes open their own connections; this one would sit idle
        os.environ["PARETUNE_MIGRATE_ON_START"] = "false"
    keeper = _SchedulerKeeper(log_level) if scheduler_process else None
    if keeper is not None:
        os.environ["PARETUNE_SCHEDULER_PROCESS"] = "true"
        keeper.start()
    try:
        if processes == 1:
            uvicorn.run(create_app(_settings()), **options)
        else:  # each process builds its app from the same environment and serves as one more replica
            uvicorn.run("service.app:create_app", factory=True, workers=processes, **options)
    finally:
        if keeper is not None:
            keeper.stop()


class _SchedulerKeeper:
    """Runs `paretune scheduler` beside the server and starts it again if it fails. The
    scheduler reads its standard input from this process, so it ends with the server even
    when the server is killed outright (`--exit-with-parent`)."""

    RESTART_S = 1.0

    def __init__(self, log_level: str) -> None:
        self.command = [sys.executable, "-m", "service.cli", "scheduler", "--log-level", log_level,
                        "--exit-with-parent"]
        self.env = {k: v for k, v in os.environ.items() if k != "PARETUNE_SCHEDULER_PROCESS"}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._keep, name="scheduler-keeper", daemon=True)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.thread.start()

    def _keep(self) -> None:
        while not self.stopping.is_set():
            self.process = subprocess.Popen(self.command, env=self.env, stdin=subprocess.PIPE)
            code = self.process.wait()
            self.process.stdin.close()  # type: ignore[union-attr]  # a pipe, as asked
            if code == 0 or self.stopping.is_set():  # stopped on purpose (SIGTERM, or with the server)
                return
            err.print(f"the scheduler process exited with status {code}; starting it again")
            self.stopping.wait(self.RESTART_S)

    def stop(self) -> None:
        self.stopping.set()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.thread.join(5)


@app.command()
def scheduler(log_level: str = "info",
              metrics_port: Annotated[int | None, typer.Option(
                  help="serve this process's Prometheus metrics (paretune_step_seconds) on this port")] = None,
              exit_with_parent: Annotated[bool, typer.Option(
                  "--exit-with-parent", help="stop when standard input closes: the process that started this one "
                  "and holds its other end is gone (as `paretune serve` starts it)")] = False,
              ) -> None:
    """Step the studies in this process (Postgres only), for server processes started with
    PARETUNE_SCHEDULER_PROCESS=true; `paretune serve` on Postgres runs one for you."""
    import asyncio
    import logging

    from service.scheduling import process

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings()
    if settings.is_sqlite:
        _fail("a scheduler process needs Postgres (PARETUNE_DATABASE_URL): SQLite has one writer at a time")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(process.run(settings, metrics_port=metrics_port, exit_with_parent=exit_with_parent))


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Upgrade the database schema to the latest version."""
    from service.store.db import Database
    from service.store.migrate import upgrade

    db = Database(_settings().database_url)
    upgrade(db.engine)
    console.print(f"schema is current on {db.engine.url.render_as_string(hide_password=True)}")


@db_app.command("current")
def db_current() -> None:
    """Show the database's schema revision against this release's; exit 1 while it is behind
    (the migration job has not run yet)."""
    from service.store.db import Database
    from service.store.migrate import schema_state

    db = Database(_settings().database_url)
    state = schema_state(db.engine)
    console.print(f"database revision {state.current or '(none)'}, this release {state.head}: {state.status}")
    if state.status == "behind":
        raise typer.Exit(1)


@token_app.command("create")
def token_create(
    name: str = "admin",
    role: Annotated[str, typer.Option(help="viewer, member, approver or admin")] = "admin",
    team: Annotated[str, typer.Option(help="team name (created if missing)")] = "default",
    worker: Annotated[bool, typer.Option(help="a worker token for --pool")] = False,
    pool: str = "default",
    superuser: Annotated[bool, typer.Option(help="operator token: manages teams and worker tokens")] = False,
    expires_in: Annotated[int | None, typer.Option(help="seconds until the token expires (default: never)",
                                                   min=1, max=10 * 365 * 86_400)] = None,
) -> None:
    """Create a token directly in the database and print its secret (shown once)."""
    from service.accounts import tokens as auth
    from service.store.db import Database
    from service.store.migrate import upgrade

    db = Database(_settings().database_url)
    upgrade(db.engine)
    with db.write() as session:
        if worker:
            _, secret = auth.create_token(session, name=name, kind="worker", role="worker", team_id=None, pool=pool,
                                          expires_in=expires_in)
        else:
            team_row = auth.get_or_create_team(session, team)
            _, secret = auth.create_token(session, name=name, kind="user", role=role, team_id=team_row.id,
                                          superuser=superuser, expires_in=expires_in)
    print(secret)


@app.command()
def up(
    host: str = "127.0.0.1",
    port: int = 8000,
    demo: Annotated[bool, typer.Option(help="start a demo study of the built-in CPU matmul")] = True,
    demo_trials: int = 40,
    workers: Annotated[int, typer.Option(help="local worker agents to start")] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="show the server's and workers' logs here, not only in the log file")
                       ] = False,
) -> None:
    """Everything on one machine: SQLite service, local worker(s), dashboard, a demo study.
    The terminal keeps to the progress, the front and warnings; the server's and workers' logs
    go to a log file in the data directory (--verbose shows them too)."""
    import uvicorn

    from service.accounts import tokens as auth
    from service.app import create_app
    from service.store.db import Database
    from service.store.migrate import upgrade

    settings = _settings()
    log_file = _log_to_file(settings.data_dir / "logs" / "up.log", verbose)
    db = Database(settings.database_url)
    upgrade(db.engine)
    with db.write() as session:
        admin = auth.bootstrap_admin(session, name="paretune up")
        _, worker_token = auth.create_token(session, name="local worker", kind="worker", role="worker",
                                            team_id=None, pool="default")
    db.dispose()
    server = f"http://{host}:{port}"
    # log_config=None: uvicorn's loggers go where the root logger does (the log file)
    config = uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning", log_config=None,
                            timeout_keep_alive=int(settings.keep_alive_s))
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    _wait_healthy(server)
    console.print(f"[bold]paretune[/bold] is up: dashboard {server}/ui/  API {server}/docs")
    console.print(f"admin token (shown once): [bold]{admin}[/bold]")
    console.print(f"database: {settings.database_url}")
    console.print(f"logs: {log_file}" + ("" if verbose else " (--verbose shows them here)"))
    procs = [_start_local_worker(server, worker_token, i, None if verbose else log_file) for i in range(workers)]
    try:
        if demo:
            api = Api(server, admin)
            study = api.call("POST", "/v1/studies", json=_demo_study(demo_trials))
            console.print(f"demo study {study['id']} queued: {server}/ui/studies/{study['id']}")
            _watch(api, study["id"], exit_when_done=False)
        console.print("serving; Ctrl-C stops everything")
        while thread.is_alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
        uv.should_exit = True
        thread.join(timeout=10)


def _log_to_file(path: Path, verbose: bool) -> Path:
    """The server's log records to `path` (appended), and to the terminal: all of them when
    verbose, else warnings and errors only."""
    import logging

    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    to_file = logging.FileHandler(path)
    to_file.setFormatter(fmt)
    to_terminal = logging.StreamHandler()
    to_terminal.setFormatter(fmt)
    to_terminal.setLevel(logging.INFO if verbose else logging.WARNING)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.handlers[:] = [to_file, to_terminal]
    return path


def _start_local_worker(server: str, token: str, index: int, log_file: Path | None = None) -> Any:
    """A worker process; its token goes through its stdin, never its command line. With a
    `log_file` its output is appended there and only its warnings, errors and tracebacks reach
    the terminal."""
    cmd = [sys.executable, "-m", "service.cli", "worker", "--server", server, "--token", "-",
           "--pool", "default", "--name", f"local-{index}"]
    env = {k: v for k, v in os.environ.items() if k not in ("PARETUNE_WORKER_TOKEN", "PARETUNE_TOKEN")}
    process = subprocess.Popen(cmd, env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE if log_file else None,
                               stderr=subprocess.STDOUT if log_file else None)
    assert process.stdin is not None
    process.stdin.write(token.encode() + b"\n")
    process.stdin.close()
    if log_file is not None:
        threading.Thread(target=_pump, args=(process.stdout, log_file), name=f"local-{index}-log",
                         daemon=True).start()
    return process


LOUD = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback ")


def _pump(output: Any, log_file: Path) -> None:
    """Every line of a worker's output to the log file; the loud ones to the terminal too
    (a traceback in full)."""
    loud = False
    with log_file.open("a", encoding="utf-8", errors="replace") as log:
        for raw in output:
            line = raw.decode("utf-8", "replace")
            log.write(line)
            log.flush()
            starts_record = line[:4].isdigit()  # "2026-..." begins a log record
            loud = any(mark in line for mark in LOUD) or (loud and not starts_record)
            if loud:
                sys.stderr.write(line)


def _wait_healthy(server: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{server}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    _fail(f"the service did not become healthy at {server}")


def _demo_study(trials: int) -> dict[str, Any]:
    return {
        "name": "demo: CPU matmul, runtime vs p99",
        "kernel": {"backend": "cpu", "builtin": "matmul"},
        "objectives": [{"name": "runtime_ms"}, {"name": "p99_ms"}],
        "budget": {"max_trials": trials},
        "parallelism": 2,
        "sampler": {"name": "nsga2", "seed": 1, "options": {"population_size": 10}},
    }


# `paretune worker`: the worker's own command (the token never goes on its command line).
app.command("worker")(run_worker_command)


# --- studies -------------------------------------------------------------------------


def load_document(path: Path) -> dict[str, Any]:
    """The study document in a YAML or JSON file (- for stdin), within the service's limits
    on size, nesting and aliases, or a one-line error."""
    from service import safe_yaml
    from service.studies.limits import MAX_BODY_BYTES, MAX_DEPTH, MAX_YAML_ALIASES

    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_BODY_BYTES + 1)
        else:
            if path.stat().st_size > MAX_BODY_BYTES:
                _fail(f"{path} is over {MAX_BODY_BYTES:,} bytes, the service's limit on a request body")
            text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read {path}: {exc}")
    try:
        doc = safe_yaml.load(text, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH, max_aliases=MAX_YAML_ALIASES)
    except safe_yaml.DocumentRefused as exc:
        _fail(f"{path} is refused: {exc}")
    except yaml.YAMLError as exc:
        _fail(f"{path} is not valid YAML/JSON: {safe_yaml.describe(exc)}")
    if not isinstance(doc, dict):
        _fail(f"{path} must hold a mapping (the study document)")
    return doc


@study_app.command("create")
def study_create(
    file: Annotated[Path, typer.Option("-f", "--file", help="study document (YAML or JSON, - for stdin)")],
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "",
    watch: Annotated[bool, typer.Option(help="follow the study until it finishes")] = False,
) -> None:
    """Create a study from a document."""
    document = load_document(file)
    api = Api(server, token)
    study = api.call("POST", "/v1/studies", json=document)
    console.print(f"study {study['id']} created ({study['name']}): {study['progress']['max_trials']} trials, "
                  f"sampler {study['sampler']}, pool {study['pool']}: {server.rstrip('/')}/ui/studies/{study['id']}",
                  soft_wrap=True)
    if watch:
        _watch(api, study["id"])


@study_app.command("list")
def study_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
    api = Api(server, token)
    table = Table("id", "name", "state", "progress", "front", "hypervolume")
    for s in api.call("GET", "/v1/studies")["items"]:
        p = s["progress"]
        hv = "-" if s["hypervolume"] is None else f"{s['hypervolume']:.4f}"
        screened = f"+{p['screened_out']}s" if p["screened_out"] else ""
        table.add_row(str(s["id"]), s["name"], s["state"],
                      f"{p['completed']}{screened}+{p['failed']}f/{p['max_trials']}", str(s["front_size"]), hv)
    console.print(table)


@study_app.command("show")
def study_show(study_id: int, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
    console.print_json(json.dumps(Api(server, token).call("GET", f"/v1/studies/{study_id}")))


def _action(action: str):  # type: ignore[no-untyped-def]
    def command(study_id: int, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
        study = Api(server, token).call("POST", f"/v1/studies/{study_id}/{action}")
        console.print(f"study {study_id} is {study['state']}")

    command.__doc__ = f"{action.capitalize()} a study."
    return command


for _name in ("pause", "resume", "cancel"):
    study_app.command(_name)(_action(_name))


@study_app.command("watch")
def study_watch(study_id: int, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "") -> None:
    """Follow a study: a progress bar and the current front, until it finishes."""
    _watch(Api(server, token), study_id)


def _watch(api: Api, study_id: int, exit_when_done: bool = True) -> None:
    """A progress bar and the live front; each failed trial, and why the study waits when it
    does, printed above them as a warning."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    study = api.call("GET", f"/v1/studies/{study_id}")
    task = progress.add_task(f"study {study_id}", total=study["progress"]["max_trials"])
    warned: set[int] = set()
    failed_seen, waiting = 0, None
    with Live(progress, console=console, refresh_per_second=4) as live:
        while True:
            study = api.call("GET", f"/v1/studies/{study_id}")
            p = study["progress"]
            hv = "-" if study["hypervolume"] is None else f"{study['hypervolume']:.4f}"
            uncounted = 0 if p.get("infeasible_counted", True) else p.get("infeasible", 0)  # not in the budget
            finished = p["completed"] + p["failed"] + p["cancelled"] + p["screened_out"] - uncounted
            progress.update(task, completed=finished,
                            description=f"study {study_id} {study['state']} front={study['front_size']} hv={hv}")
            if p["failed"] > failed_seen:
                failed_seen = p["failed"]
                for line in _failures(api, study_id, warned):
                    live.console.print(line, style="yellow", markup=False, highlight=False)
            if study.get("queued_reason") != waiting:
                waiting = study.get("queued_reason")
                if waiting:
                    live.console.print(f"warning: study {study_id} waits: {waiting}", style="yellow",
                                       markup=False, highlight=False)
            front = api.call("GET", f"/v1/studies/{study_id}/front")
            live.update(Group(progress, _front_table(front)))
            if study["state"] in ("completed", "cancelled", "failed") and p["in_flight"] == 0:
                break
            time.sleep(1.0)
    console.print(f"study {study_id} {study['state']}: {study['finish_reason']}")


def _failures(api: Api, study_id: int, seen: set[int], limit: int = 20) -> list[str]:
    """A warning line for each failed trial not in `seen` (the latest `limit`), which it joins."""
    failed = api.call("GET", f"/v1/studies/{study_id}/trials",
                      params={"state": "failed", "sort": "-number", "limit": limit})["items"]
    lines = []
    for trial in reversed(failed):
        if trial["number"] not in seen:
            seen.add(trial["number"])
            message = (trial["message"] or "").splitlines()[0][:200] if trial["message"] else ""
            lines.append(f"warning: trial {trial['number']} failed ({trial['failure_reason']}): {message}")
    return lines


def _front_table(front: dict[str, Any]) -> Table:
    """The front with ratios to the baseline; configurations as their changes from it."""
    names = [o["name"] for o in front["objectives"]]
    table = Table("trial", *names, *[f"{n} / base" for n in names], "changes from the baseline",
                  title="Pareto front")
    rows = list(front["trials"])
    baseline = front["baseline"] or {}
    if baseline.get("values") and not baseline.get("on_front"):
        rows.append(baseline)
    for t in rows:
        values = t["values"] or {}
        rel = t["relative"] or {}
        label = f"{t['number']}{' (baseline)' if t['is_baseline'] else ''}"
        table.add_row(label, *[f"{values.get(n, float('nan')):.4g}" for n in names],
                      *[f"{rel[n]:.3f}x" if n in rel else "-" for n in names],
                      _config_changes(t["config"], baseline.get("config") or {}))
    return table


def _config_changes(config: dict[str, Any], baseline: dict[str, Any]) -> str:
    changes = [f"{k}={json.dumps(v)}" for k, v in config.items() if baseline.get(k) != v]
    return " ".join(changes) if changes else "(same as baseline)"


@app.command()
def front(study_id: int, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "",
          as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print a study's Pareto front with ratios to the baseline."""
    data = Api(server, token).call("GET", f"/v1/studies/{study_id}/front")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    console.print(_front_table(data))
    hv = data["hypervolume"]
    console.print(f"hypervolume {hv if hv is None else round(hv, 6)} against {data['reference_point']} x baseline")


@app.command()
def compare(study_ids: Annotated[list[int], typer.Argument(help="2 to 6 studies of one kernel and objectives")],
            server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = "",
            as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print the fronts of several studies, each with ratios to its own baseline, and what
    differs between their targets (GPU, shapes, toolchain, ACF, pool)."""
    data = Api(server, token).call("GET", "/v1/compare", params={"studies": ",".join(map(str, study_ids))})
    if as_json:
        print(json.dumps(data, indent=2))
        return
    names = [o["name"] for o in data["objectives"]]
    for study in data["studies"]:
        console.print(_compared_table(study, names))
    if not data["differences"]:
        console.print("differences: none (the same target)")
        return
    console.print("differences:")
    for difference in data["differences"]:
        values = "; ".join(f"study {s['id']}: {_target_text(v)}"
                           for s, v in zip(data["studies"], difference["values"], strict=True))
        console.print(f"  {difference['field']}: {values}", markup=False, highlight=False)


def _compared_table(study: dict[str, Any], names: list[str]) -> Table:
    """One study's front: raw values and ratios to its baseline, the baseline last."""
    target = study["target"]
    device = ", ".join(target["gpu"] or target["cpu"]) or "device not reported yet"
    title = f"study {study['id']}: {study['name']} ({study['state']}; {device}; pool {target['pool']})"
    table = Table("trial", *names, *[f"{n} / base" for n in names], title=escape(title))
    baseline = study["baseline_number"]
    for point in study["points"]:
        label = f"{point['number']}{' (baseline)' if point['number'] == baseline else ''}"
        table.add_row(label, *[f"{point['values'].get(n, float('nan')):.4g}" for n in names],
                      *[f"{point['normalised'][n]:.3f}x" if n in point["normalised"] else "-" for n in names])
    if study["baseline"] and baseline not in [p["number"] for p in study["points"]]:
        base = study["baseline"]
        table.add_row(f"{study['baseline_number']} (baseline)", *[f"{base.get(n, float('nan')):.4g}" for n in names],
                      *["1.000x" if base.get(n) else "-" for n in names])
    return table


def _target_text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_target_text(v) for v in value) or "not reported"
    if isinstance(value, dict):  # a workload shape
        dims = " ".join(f"{k}={v}" for k, v in value["dims"].items())
        return dims if value.get("weight", 1.0) == 1.0 else f"{dims} (weight {value['weight']:g})"
    return "yes" if value is True else "no" if value is False else str(value)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
