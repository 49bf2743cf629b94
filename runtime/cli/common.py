"""Options and error handling shared by the CLI subcommands.

Bad input never ends in a traceback: a broken rule file, an unreadable snapshot or an unknown kind
prints one clear message per problem on stderr and exits with code 2.

This module is imported by every subcommand, so it imports the engine, the rules and the snapshots
only inside the functions that use them: ``--help`` of a command stays light.
"""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn

import click

from runtime.rules import compiledcache

from runtime.rules.loader import DEFAULT_RULES_DIR

if TYPE_CHECKING:
    from runtime.engine.policy import Policy
    from runtime.rules.loader import RuleLoadError

EXIT_BAD_INPUT = 2


def rules_option(func: Callable | None = None, *, log: bool = False) -> Callable:
    """``--rules DIR`` (default: the installed rules/, or env ACCELPOLICY_RULES), with the compiled-rules
    cache options (:func:`rules_cache_options`; ``log`` as there). ``@rules_option`` or
    ``@rules_option(log=True)``."""
    def decorate(command: Callable) -> Callable:
        return click.option(
            "--rules", "rules_dir", type=click.Path(file_okay=False, path_type=Path),
            envvar="ACCELPOLICY_RULES", default=DEFAULT_RULES_DIR, show_default=True,
            help="Directory of rule files (rules/README.md).")(rules_cache_options(command, log=log))
    return decorate(func) if func is not None else decorate


def rules_cache_options(func: Callable | None = None, *, log: bool = False) -> Callable:
    """``--rules-cache DIR`` and ``--no-rules-cache``: where this process keeps compiled rules
    (:mod:`runtime.rules.compiledcache`). They configure the process and are not passed to the command.
    A damaged cache entry is reported as ``warning: ...`` on stderr, or in the log when ``log``
    (the long-running commands, whose stderr is their log)."""
    def decorate(command: Callable) -> Callable:
        def apply(ctx: click.Context, param: click.Parameter, value) -> None:
            if "accelpolicy.rules_cache" not in ctx.meta:  # the choice lasts as long as the command
                ctx.call_on_close(compiledcache.reset)
            chosen = ctx.meta.setdefault("accelpolicy.rules_cache", {})
            chosen[param.name] = value
            directories = [] if chosen.get("no_rules_cache") else (
                [chosen["rules_cache"]] if chosen.get("rules_cache") else compiledcache.default_directories())
            compiledcache.configure(directories, None if log else warn_one)

        command = click.option(
            "--no-rules-cache", is_flag=True, expose_value=False, callback=apply,
            help="Compile the rules without reading or writing the compiled-rules cache.")(command)
        return click.option(
            "--rules-cache", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
            expose_value=False, callback=apply,
            help="Where compiled rules are kept, so unchanged rule files load without parsing "
                 "(default: $ACCELPOLICY_RULES_CACHE, 'off' for none; else ~/.cache/accelpolicy/rules, "
                 "under $XDG_CACHE_HOME when set).")(command)
    return decorate(func) if func is not None else decorate


#: the release that stops accepting an option's former name (:func:`former_names`)
FORMER_NAMES_UNTIL = "0.3.0"


class FormerName(click.Option):
    """A hidden option that is an option's former name (``current``: the name now): given, it prints a
    deprecation warning and stands for the current option (:func:`former_names`)."""

    def __init__(self, former: str, target: click.Option, current: str):
        super().__init__([former, f"former_{target.name}"], type=target.type, default=None, hidden=True,
                         metavar=target.metavar, multiple=target.multiple)
        self.former, self.current, self.target = former, current, target.name


def former_names(renamed: dict[str, str]) -> Callable:
    """Accept each former option name of ``renamed`` (former -> current, e.g. ``{"--port":
    "--webhook-port"}``) until :data:`FORMER_NAMES_UNTIL`: the value of a former name is the current
    option's, with ``warning: --port is deprecated, use --webhook-port (...)`` on stderr; both given on the
    command line exits 2. Put it above the command's options (it finds the current ones among them)."""
    def decorate(command: Callable) -> Callable:
        params = getattr(command, "__click_params__", [])
        aliases = [FormerName(former, next(p for p in params if current in p.opts), current)
                   for former, current in renamed.items()]

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            ctx = click.get_current_context()
            for alias in aliases:
                value = kwargs.pop(alias.name, None)
                if value is None or value == ():
                    continue
                warn_one(f"{alias.former} is deprecated, use {alias.current} (the former name is accepted "
                         f"until accelpolicy {FORMER_NAMES_UNTIL})")
                if ctx.get_parameter_source(alias.target) == click.core.ParameterSource.COMMANDLINE:
                    fail(f"{alias.former} and {alias.current} are one option: give {alias.current} alone")
                kwargs[alias.target] = ctx.params[alias.target] = value
            return command(*args, **kwargs)
        wrapper.__click_params__ = [*params, *aliases]
        return wrapper
    return decorate


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with code 2 (bad input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _refused(exc: "RuleLoadError") -> str:
    return "rule files refused (the previous rules, if any, stay in force):\n" + "\n".join(
        f"  {problem}" for problem in exc.problems)


def bad_input_exits(func: Callable) -> Callable:
    """Turn the known bad-input errors into a message on stderr and exit code 2."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from runtime.engine.snapshot import SnapshotError
        from runtime.report.tables import UnknownKindError
        from runtime.rules.cel.errors import CelEvalError
        from runtime.rules.loader import RuleLoadError

        try:
            return func(*args, **kwargs)
        except RuleLoadError as exc:
            fail(_refused(exc))
        except (SnapshotError, UnknownKindError) as exc:
            fail(exc.args[0] if exc.args else str(exc))
        except CelEvalError as exc:
            fail(f"a rule failed to evaluate (fix the rule file it names): {exc}")
    return wrapper


SNAPSHOT_INSTEAD = ", or --snapshot PATH to read files instead"   # the read commands' way around a cluster


def connect_or_exit(kubeconfig: Path | str | None, context: str | None = None, instead: str = "",
                    quiet: bool = False):
    """A Session (:func:`runtime.kube.session.connect`) of ``kubeconfig`` (else ``$KUBECONFIG``,
    ``~/.kube/config``, the in-cluster ServiceAccount) and ``context``. No usable configuration exits 2
    in kubectl's words (``instead``: what else the command could be given, e.g. :data:`SNAPSHOT_INSTEAD`);
    an API server that does not answer exits 1 (:func:`unreachable`). ``quiet`` (one-shot commands)
    silences urllib3's warning per retried connection: the command prints its one error."""
    import logging

    from runtime.kube.session import KubeApiError, KubeConfigError, connect

    if quiet:
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    try:
        return connect(kubeconfig, context)
    except KubeConfigError as exc:
        fail(no_kubeconfig_message(kubeconfig, context, exc, instead))
    except KubeApiError as exc:
        unreachable(exc)


def no_kubeconfig_message(kubeconfig: Path | str | None, context: str | None, exc: Exception,
                          instead: str = "") -> str:
    """The error for no usable configuration, as kubectl words it, with what to give instead."""
    where = str(kubeconfig) if kubeconfig else (os.environ.get("KUBECONFIG") or "~/.kube/config")
    detail = str(exc).split(": ", 1)[-1]
    if context and f"Expected object with name {context} " in detail:
        return f'context "{context}" does not exist in {where}'
    return (f"no configuration has been provided ({where}{f', context {context}' if context else ''}: "
            f"{detail}); give --kubeconfig FILE or set KUBECONFIG{instead}")


def unreachable(exc) -> NoReturn:
    """Exit 1: the API server did not answer (its address and the transport's words, as kubectl says it)
    or answered an error (``exc``: a :class:`runtime.kube.session.KubeApiError`)."""
    if exc.status == 0:
        host, _, detail = exc.message.partition(": ") if exc.message.startswith("http") else \
            ("of the kubeconfig", "", exc.message)
        cause = re.findall(r"\] ([^\"')]+)", detail) or [detail]
        click.echo(f"error: the connection to the server {host} was refused - did you specify the right host "
                   f"or port? ({cause[-1]})", err=True)
    else:
        click.echo(f"error: the server answered {exc.status} {exc.reason}: {exc.message}", err=True)
    sys.exit(1)


def stop_on_signals() -> threading.Event:
    """An Event that SIGINT and SIGTERM set: what a long-running command (controller, admission, webhook)
    waits on before it stops (draining first: ``--webhook-drain-seconds``)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


VERBOSE = False   # `accelpolicy -v`: say which rules directory is read


def rules_read(rules_dir: Path | str | None) -> Path:
    """The rules directory a command reads (the installed rules/ when None). With ``-v`` it is named on
    stderr; the installed rules read while the current directory holds another ``rules/`` (an installed
    accelpolicy run inside another checkout) is always said, with how to read that one instead."""
    chosen = Path(rules_dir or DEFAULT_RULES_DIR)
    here = Path.cwd() / "rules"
    if VERBOSE:
        click.echo(f"reading rules from {chosen}", err=True)
    if Path(chosen).resolve() == Path(DEFAULT_RULES_DIR).resolve() and here.is_dir() \
            and here.resolve() != chosen.resolve() and (here / "constants.yaml").is_file():
        click.echo(f"note: reading the installation's rules ({chosen}), not ./rules (pass --rules rules "
                   f"or set ACCELPOLICY_RULES to read those)", err=True)
    return chosen


def load_policy(rules_dir: Path | str | None) -> "Policy":
    """Load and compile the rule files (default directory when None, see :func:`rules_read`);
    RuleLoadError on any problem."""
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules

    return Policy(load_rules(rules_read(rules_dir)))


def starting_policy(rules_dir: Path | str | None, session, namespace: str, configmap: str | None) -> "Policy":
    """:func:`load_policy`, or with the rules ConfigMap ``namespace``/``configmap`` the generation in force
    (:func:`runtime.reload.holder.starting_rules`: the serving copy when the mounted rules are held, refused
    or not decided yet; docs/rule-authoring.md "How a rules change goes live"). RuleLoadError when the rules
    chosen do not load."""
    import tempfile

    from runtime.engine.policy import Policy
    from runtime.model.reloadgate import ReloadAnnotations
    from runtime.reload.board import Board
    from runtime.reload.holder import starting_rules
    from runtime.rules.loader import RuleLoadError, load_rules

    root = rules_read(rules_dir)
    if not configmap:
        return Policy(load_rules(root))
    try:   # the annotations' keys: the mounted rules' (a broken set: the shipped keys)
        keys = load_rules(root).get("ReloadGate").annotations
    except RuleLoadError:
        keys = ReloadAnnotations()
    board = Board(session, namespace, configmap, keys=lambda: keys)
    return Policy(starting_rules(root, board, tempfile.mkdtemp(prefix="accelpolicy-serving-rules-")))


def policy_and_session(rules_dir: Path | str | None, connect: Callable[[], object], namespace: str,
                       configmap: str | None) -> tuple["Policy", object]:
    """``(policy, session)`` of a process that serves or decides rules: without the rules ConfigMap the
    rules load first (bad input before connecting), then ``connect()``; with it, connected first, then
    :func:`starting_policy`."""
    policy = None if configmap else load_policy(rules_dir)
    session = connect()
    return policy or starting_policy(rules_dir, session, namespace, configmap), session


def policy_from(rules: Path | str | None) -> "Policy":
    """:func:`load_policy`; a broken rule file exits 2 listing every problem."""
    from runtime.rules.loader import RuleLoadError

    try:
        return load_policy(rules)
    except RuleLoadError as exc:
        fail(_refused(exc))


def engine_from(policy: "Policy"):
    """The AdmissionEngine of ``policy``; a dangling ``paramsFrom``/``builtin`` exits 2."""
    from runtime.engine.admission import AdmissionEngine

    try:
        return AdmissionEngine(policy)
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc))


def snapshot_from(paths: tuple[str, ...]):
    """The snapshot of ``paths`` (None when empty); unreadable input exits 2."""
    from runtime.engine.snapshot import SnapshotError
    from runtime.snapshots import load_snapshot

    if not paths:
        return None
    try:
        return load_snapshot(list(paths))
    except SnapshotError as exc:
        fail(str(exc))


def offline_snapshot(policy: Policy, paths: tuple[str, ...]):
    """:func:`snapshot_from` with the DRA nodes planned from their ResourceSlices as their agents would
    (:func:`runtime.engine.devices.draoffline.with_dra_nodes`, docs/concepts/dra.md "Accelerators from DRA
    drivers"): what ``get``, ``derive``, ``explain``, ``audit`` and ``admit`` read. None when ``paths`` is
    empty."""
    snapshot = snapshot_from(paths)
    if snapshot is None:
        return None
    from runtime.engine.devices.draoffline import with_dra_nodes
    try:
        return with_dra_nodes(policy, snapshot)[0]
    except ValueError as exc:
        # a DRA node's Node that the agent could not plan either (e.g. its capacity.cpu)
        fail(f"planning the nodes whose accelerators come from ResourceSlices: {exc}")


def emit(objects: list[dict], output: str, as_list: bool = True, stream: bool = False) -> None:
    """Print objects as kubectl does: a ``v1 List`` (or the single object when ``as_list`` is false) in
    YAML or JSON; ``stream`` prints a multi-document YAML stream instead (for ``kubectl apply -f -``)."""
    import yaml

    if stream and output == "yaml":
        click.echo(yaml.safe_dump_all(objects, sort_keys=False, width=200, explicit_start=True).rstrip("\n"))
        return
    payload = {"apiVersion": "v1", "kind": "List", "items": objects} if as_list else objects[0]
    if output == "json":
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(yaml.safe_dump(payload, sort_keys=False, width=200).rstrip("\n"))


def warn(messages) -> None:
    """Print each message as ``warning: <message>`` on stderr."""
    for message in messages:
        warn_one(message)


def warn_one(message: str) -> None:
    """Print ``warning: <message>`` on stderr."""
    click.echo(f"warning: {message}", err=True)


def _parse_now(_ctx, _param, value: str | None):
    from datetime import datetime, timezone

    from runtime.model.rfc3339 import parse_time

    if value is None:
        return datetime.now(timezone.utc)
    found = parse_time(value)
    if found is None:
        raise click.BadParameter(f"{value!r} is not an RFC 3339 time such as 2026-12-31T18:00:00Z")
    return found


def now_option(func: Callable) -> Callable:
    """``--now TIME``: the instant PolicyExceptions are judged at (docs/concepts/exceptions.md; RFC 3339,
    default: this machine's clock now); the command receives ``now``, an aware datetime. A bad time
    exits 2."""
    return click.option("--now", "now", default=None, metavar="TIME", callback=_parse_now,
                        help="Judge PolicyExceptions as at TIME (RFC 3339, e.g. 2026-12-31T18:00:00Z; "
                             "default: now).")(func)
