"""Named crash points: a broker process kills itself (SIGKILL, as ``kill -9``) at a named step
when a crash test asks for it, so that the test can check what a restart recovers from exactly
that step (``tests/transaction/test_txn_crash_points.py``).

``SLUICE_CRASH_AT`` (read once, when this module is first imported) lists the armed points,
comma-separated, each ``<point>`` or ``<point>@<scope>``: the process dies the first time code
reaches :func:`crash_point` with that name (and, when a scope is given, that scope -- e.g. a
transactional id or a topic -- so that one broker can be armed for several tests at once, each
firing only for its own transaction). Unset, :func:`crash_point` returns at its first test and
nothing else is ever built: callers pass the name and scope as they are, no formatting.

``SLUICE_CRASH_ONCE_DIR`` (optional) makes each armed point fire once among every process
given the same directory: the process that reaches it first creates ``<dir>/<point>@<scope>``
(``O_EXCL``) and dies; the others, and a restarted process, find the file and go on. A cluster
test arms every broker alike this way, and the broker that takes over from the dead one (the new
coordinator sending the markers again, the new leader appending them) is not killed in turn.

Dying is ``os.kill(getpid(), SIGKILL)``: no ``finally``, no flush, no clean-shutdown marker --
what reached the page cache is what the next start finds, as after ``kill -9``. One JSON line
(``{"event": "crash point", ...}``) goes to stderr first with an unbuffered ``os.write``, so
that the test can check from the broker's log which point killed it.

The points, by where they are (each says what is durable when it fires):

* ``txn.before.<State>`` / ``txn.after.<State>`` (the transaction coordinator, scope: the
  transactional id): before a transition to ``<State>`` (Kafka's state names: ``Ongoing``,
  ``PrepareCommit``, ``CompleteAbort``, ...) is written to ``__transaction_state``, and once it
  is written (acks=all) but before it is applied or answered;
* ``txn.markers.acknowledged`` (the coordinator's marker sender, scope: each topic of the
  partitions acknowledged): a leader acknowledged its partitions' markers while other leaders'
  answers are still to come (only when the transaction's partitions have more than one leader);
* ``partition.marker.appended`` (a partition leader, scope: the topic): a marker was appended
  to the leader's log (not yet replicated, not answered, the request's other partitions not yet
  done);
* ``partition.markers.written`` (a partition leader, scope: each topic of the request): every
  marker of a WriteTxnMarkers request is written and replicated, the answer not sent;
* ``group.txn_offsets.written`` (the group coordinator, scope: the group id): a TxnOffsetCommit
  is written to ``__consumer_offsets`` (pending until the marker), the answer not sent.
"""

from __future__ import annotations

import json
import os
import signal

#: The environment variable naming the armed points (module docstring).
ENV = "SLUICE_CRASH_AT"
#: The directory that makes each point fire once across processes (module docstring).
ONCE_DIR_ENV = "SLUICE_CRASH_ONCE_DIR"


def _parse(spec: str) -> dict[str, frozenset[str] | None]:
    """``point -> scopes`` (None: any scope) from ``SLUICE_CRASH_AT``'s value."""
    armed: dict[str, set[str] | None] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, scope = item.partition("@")
        if not scope:
            armed[point] = None
        elif (scopes := armed.setdefault(point, set())) is not None:
            scopes.add(scope)
    return {p: None if s is None else frozenset(s) for p, s in armed.items()}


_ARMED = _parse(os.environ.get(ENV, ""))
_ONCE_DIR = os.environ.get(ONCE_DIR_ENV) if _ARMED else None


def _first(point: str, scope: str) -> bool:
    """Whether no process sharing the once-directory fired this point yet (claims it)."""
    if _ONCE_DIR is None:
        return True
    name = f"{point}@{scope}".replace("/", "_")
    try:
        os.close(os.open(os.path.join(_ONCE_DIR, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def crash_point(point: str, scope: str = "") -> None:
    """Die here (SIGKILL) if ``point`` is armed for ``scope``; else return."""
    if not _ARMED:
        return
    scopes = _ARMED.get(point, frozenset())
    if (scopes is None or scope in scopes) and _first(point, scope):
        line = json.dumps({"event": "crash point", "point": point, "scope": scope})
        os.write(2, line.encode() + b"\n")
        os.kill(os.getpid(), signal.SIGKILL)
