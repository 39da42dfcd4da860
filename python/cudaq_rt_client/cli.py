"""Call the handlers of a `cudaq-rt-run PKG --serve` server over UDP, send it any bytes, or
load-test it.

The command line of cudaq-rt-client(1): argv parsed and checked whole before anything is sent,
one library call, its answer printed; every error one line on stderr, exit status as
cudaq-rt-run's."""
from __future__ import annotations

import argparse
import errno
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn, Sequence

from . import __version__
from .bench import bench
from .client import Client, NoAnswerError, parse_address
from .payload import (ResultType, decode_result, encode_args, escape, parse_hex,
                      parse_result_type)
from .wire import ProtocolError, Response, status_name, status_text

PROG = "cudaq-rt-client"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_HANDLER_ERROR, EXIT_PROTOCOL_ERROR = 0, 1, 2, 3, 4
MAX_TIMEOUT_S = 1e6
# The version of schemas/client.schema.json that --json documents follow: raised when a field
# changes meaning or goes away (a field added keeps it).
JSON_FORMAT_VERSION = 1

# The payload options of tools/cudaq-rt-client.py before --arg: each is the --arg of its type, in
# command-line order with the others.
SHORTCUTS = {"hex": "hex", "text": "str", "i32": "i32", "u32": "u32", "f32": "f32", "i64": "i64",
             "f64": "f64"}


class UsageError(Exception):
    """Exit status 2: the command line asks for something that cannot be sent."""


class Failure(Exception):
    """Exit status 1: no answer, an answer that is no response, a network error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(escape(message))


class _Shortcut(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        specs = list(getattr(namespace, "args", None) or [])
        specs.append(f"{self.const}:{values}")
        setattr(namespace, "args", specs)


def _parser() -> _Parser:
    p = _Parser(prog=PROG, allow_abbrev=False, description=(__doc__ or "").split("\n\n")[0],
                epilog="Exit status: 0 ok, 1 failure (no answer, a wrong one), 2 usage, "
                       "3 handler error, 4 protocol error. See cudaq-rt-client(1).")
    p.add_argument("address", help="HOST:PORT the server printed ('serving on ...')")
    what = p.add_argument_group("what to send")
    what.add_argument("--call", metavar="NAME", help="call the handler NAME once")
    what.add_argument("--arg", metavar="SPEC", dest="args", action="append",
                      help="an argument, as cudaq-rt-run's: TYPE:V[,V...], hex:HEX, str:TEXT or "
                           "@FILE; repeatable, in order")
    what.add_argument("--raw", metavar="HEX", help="send these bytes as one datagram")
    what.add_argument("--bench", metavar="N", type=int,
                      help="send N requests (--call, else echo) and check every answer")
    what.add_argument("--inflight", metavar="K", type=int,
                      help="--bench: keep up to K requests in flight (default 1)")
    older = p.add_argument_group("payload options of tools/cudaq-rt-client.py before --arg")
    for option, kind in SHORTCUTS.items():
        older.add_argument("--" + option, metavar="V", action=_Shortcut, const=kind,
                           help=f"the same as --arg {kind}:V")
    out = p.add_argument_group("output")
    out.add_argument("--result", metavar="TYPE",
                     help="how to print the result: hex (default), str, raw, i8 ... f64")
    out.add_argument("--timeout", metavar="S", type=float, default=5.0,
                     help="seconds to wait for an answer (default 5)")
    out.add_argument("--json", action="store_true", help="print one JSON document")
    out.add_argument("--version", action="version",
                     version=f"{PROG} {__version__} (Python {platform.python_version()})")
    return p


def _check(args: argparse.Namespace) -> None:
    if args.call is None and args.raw is None and args.bench is None:
        raise UsageError("nothing to do: give --call NAME, --raw HEX or --bench N")
    if args.raw is not None and (args.call is not None or args.bench is not None or args.args):
        raise UsageError("--raw sends its bytes alone: not with --call, --arg or --bench")
    if args.args and args.call is None:
        raise UsageError("--arg needs --call")
    if args.bench is not None and args.bench < 1:
        raise UsageError("--bench: the number of requests must be at least 1")
    if args.inflight is not None and args.bench is None:
        raise UsageError("--inflight needs --bench")
    if args.inflight is not None and args.inflight < 1:
        raise UsageError("--inflight: must be at least 1")
    if not args.timeout > 0:
        raise UsageError("--timeout: must be more than 0 seconds")
    if args.timeout > MAX_TIMEOUT_S:
        raise UsageError(f"--timeout: must be at most {MAX_TIMEOUT_S:.0f} seconds")
    if args.result is not None and args.bench is not None:
        raise UsageError("--result goes with --call or --raw, not --bench")


def _answer_json(answer: Response, kind: ResultType, latency_us: float) -> dict[str, Any]:
    doc: dict[str, Any] = {"request_id": answer.request_id, "status": answer.status,
                           "status_name": status_name(answer.status),
                           "result_hex": answer.result.hex(), "latency_us": latency_us}
    try:
        doc["result"] = decode_result(kind, answer.result)
    except ValueError as e:
        doc["decode_error"] = str(e)
    return doc


def _exit_status(status: int) -> int:
    return EXIT_OK if status == 0 else EXIT_HANDLER_ERROR if status > 0 else EXIT_PROTOCOL_ERROR


def _show_answer(answer: Response, kind: ResultType) -> int:
    """Prints an answer as cudaq-rt-run does; its exit status."""
    text = status_text(answer.status)
    status = _exit_status(answer.status)
    try:
        decoded = decode_result(kind, answer.result)
    except ValueError as e:
        print(f"{text}: ({e})")
        return EXIT_USAGE if status == EXIT_OK else status
    if kind.kind == "raw":
        sys.stdout.flush()
        sys.stdout.buffer.write(decoded.encode("latin-1"))
        sys.stdout.flush()
        print(text, file=sys.stderr)
    elif answer.status < 0 or not answer.result:
        print(text)
    else:
        print(f"{text}: {decoded}")
    return status


@dataclass
class _Plan:
    """What the command line asks for, parsed: every usage error is found before anything is
    sent."""
    address: tuple[str, int]
    kind: ResultType
    frame: bytes | None  # --raw
    payload: bytes | None  # --call's, or --bench's when --arg is given


def _plan(args: argparse.Namespace) -> _Plan:
    _check(args)
    try:
        kind = parse_result_type(args.result or "hex")
    except ValueError as e:
        raise UsageError(f"--result: {e}") from None
    if kind.kind == "raw" and args.json:
        raise UsageError("--result raw writes bytes to stdout: not with --json")
    frame = None
    if args.raw is not None:
        try:
            frame = parse_hex(args.raw)
        except ValueError as e:
            raise UsageError(f"--raw: {e}") from None
    try:
        payload = encode_args(args.args) if args.args else None
        address = parse_address(args.address)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return _Plan(address, kind, frame, payload)


def _exchange(client: Client, args: argparse.Namespace, plan: _Plan,
              doc: dict[str, Any]) -> int:
    t0 = time.perf_counter()
    try:
        if plan.frame is not None:
            doc["sent_hex"] = plan.frame.hex()
            client.send(plan.frame)
            answer = client.receive()
        else:
            doc["handler"] = args.call
            answer = client.call(args.call, plan.payload or b"")
    except (NoAnswerError, ProtocolError) as e:
        raise Failure(str(e)) from None
    latency_us = (time.perf_counter() - t0) * 1e6
    if args.json:
        doc.update(_answer_json(answer, plan.kind, latency_us))
        status = _exit_status(answer.status)
        return EXIT_USAGE if status == EXIT_OK and "decode_error" in doc else status
    return _show_answer(answer, plan.kind)


def _bench(client: Client, args: argparse.Namespace, plan: _Plan, doc: dict[str, Any]) -> int:
    r = bench(client, args.bench, args.inflight or 1, args.call or "echo", plan.payload)
    if r.refused:  # the server is gone: a failure to reach it, as before any answer
        raise Failure(f"{escape(args.address)}: {os.strerror(errno.ECONNREFUSED)}")
    if args.json:
        doc["bench"] = r.as_json()
    else:
        sys.stdout.write(r.text())
    return EXIT_OK if r.answered == args.bench else EXIT_FAILURE


def _run(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    plan = _plan(args)
    try:
        client = Client(plan.address, args.timeout)
    except OSError as e:
        raise Failure(f"{escape(args.address)}: {e.strerror or e}") from None
    with client:
        try:
            if args.bench is not None:
                return _bench(client, args, plan, doc)
            return _exchange(client, args, plan, doc)
        except OSError as e:
            raise Failure(f"{escape(args.address)}: {e.strerror or e}") from None


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except UsageError as e:
        _error(str(e))
        return EXIT_USAGE
    doc: dict[str, Any] = {"format_version": JSON_FORMAT_VERSION, "address": args.address}
    try:
        try:
            status = _run(args, doc)
        except UsageError as e:
            _error(str(e))
            status, doc["error"] = EXIT_USAGE, str(e)
        except Failure as e:
            _error(str(e))
            status, doc["error"] = EXIT_FAILURE, str(e)
        except KeyboardInterrupt:
            _error("interrupted")
            return 130
        if args.json:
            doc["exit_status"] = status
            print(json.dumps(doc, indent=2, allow_nan=False))
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Nothing more can reach standard output; keep the interpreter's last flush quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _error("cannot write standard output: Broken pipe")
        return EXIT_FAILURE
