"""The log side of C2SP tlog-witness: push a run's newest signed tree head to its witnesses
and keep the cosignatures they return.

For each witness (``VERITRAIN_WITNESSES``, veritrain/witnesses/endpoints.py):

1. the old size is the largest size of the run that witness cosigned (the ledger's
   ``cosignatures`` table; 0 if none), and the consistency proof runs from there to the
   head (tlog-witness: none from 0). When the table says the witness cosigned this very head,
   the witness is asked what it holds now (its tlog-witness monitoring view,
   veritrain/witnesses/views.py): only that exact head is "up-to-date"; a larger one is a
   rollback of this log, reported as in 3 -- our table may have been rolled back with it;
2. ``POST <url>/add-checkpoint``; transport errors, 5xx and 429 are retried with exponential
   backoff, a bounded number of times;
3. a 409 (``text/x.tlog.size``) names the size the witness really holds (it lost a reply, or
   our table is behind): one retry with the proof from that size. A size beyond our head
   means the witness saw a larger tree than this log now has -- a rollback or a fork -- and
   is reported, never papered over;
4. a 200 carries cosignature lines: the ledger stores one only after it verified under the
   witness's key over this exact head (``Ledger.add_cosignatures``).

Nothing here raises because a witness is down, slow or refuses: every witness gets a
:class:`WitnessOutcome` in the :class:`PushResult`, and the next push catches it up (its
proof starts from whatever it last cosigned). With no witnesses configured a push costs
nothing: no database read, no thread, no connection.

Training must never wait on witnesses, so the recorder should hand heads to a
:class:`BackgroundPusher` after each append: one daemon thread pushes the newest head of
each notified run, coalescing bursts (a witness cosigning head N+1 vouches for every head
before it, so skipping intermediate heads loses nothing). ``close()`` pushes what is pending
once more, within a deadline, so the final head of a run is submitted before the process
exits. :func:`push_latest` is the synchronous form (``veritrain witness push``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import httpx

from ledger.append import ROLE_LOG
from ledger.errors import LedgerError
from ledger.note import open_note
from ledger.records import SignedTreeHead
from ledger.service import Ledger
from ledger.tlog_checkpoint import parse_checkpoint
from ledger.witness.submission import SIZE_CONTENT_TYPE, AddCheckpoint, parse_size
from veritrain.witnesses.endpoints import WitnessEndpoint
from veritrain.witnesses.views import WitnessViewError, fetch_view

log = logging.getLogger(__name__)

Status = Literal["cosigned", "up-to-date", "refused", "unreachable", "invalid"]
"""cosigned: a new cosignature was verified and stored; up-to-date: the witness had already
cosigned this head, nothing was sent; refused: the witness answered 4xx (the detail says
why: unknown log, untrusted key, rollback or fork); unreachable: no answer after every
retry (down, timing out, 5xx); invalid: it answered 200 with no cosignature that verifies."""


@dataclass(frozen=True, kw_only=True)
class PushPolicy:
    """How hard to try one witness before reporting it."""

    timeout_s: float = 5.0
    """Per request (connect, read, write). A witness answers from one row lookup and one
    signature: milliseconds on a healthy host."""
    attempts: int = 3
    """Requests per witness when the answer is a transport error, 5xx or 429."""
    backoff_s: float = 0.5
    """Wait before the second attempt; doubled before each later one."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s: expected > 0, got {self.timeout_s}")
        if self.attempts < 1:
            raise ValueError(f"attempts: expected >= 1, got {self.attempts}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s: expected >= 0, got {self.backoff_s}")


@dataclass(frozen=True)
class WitnessOutcome:
    """What one witness did with one tree head."""

    witness: str
    """The witness's key name."""
    url: str
    status: Status
    size: int
    """Size of the tree head submitted."""
    detail: str
    """One line for a person: the witness's answer, or what went wrong."""
    http_status: int | None = None
    """The last HTTP status received (None when none was)."""


@dataclass(frozen=True)
class PushResult:
    """The outcome of pushing one tree head of one run to every configured witness."""

    run_id: str
    size: int
    """Size of the tree head pushed (0 when no witness is configured)."""
    outcomes: tuple[WitnessOutcome, ...]

    @property
    def cosigners(self) -> list[str]:
        """Names of the witnesses whose cosignature of this head the ledger now holds."""
        return [o.witness for o in self.outcomes if o.status in ("cosigned", "up-to-date")]

    @property
    def ok(self) -> bool:
        """Every configured witness holds a cosignature of this head."""
        return len(self.cosigners) == len(self.outcomes)


def push_latest(
    ledger: Ledger,
    run_id: str,
    witnesses: Sequence[WitnessEndpoint],
    *,
    policy: PushPolicy | None = None,
    client: httpx.Client | None = None,
) -> PushResult:
    """Submit ``run_id``'s newest signed tree head to every witness and store the
    cosignatures that verify. Never raises for a witness's failure (see the module
    docstring); raises :class:`~ledger.errors.LedgerError` only if the run cannot be read."""
    return push_tree_head(ledger, run_id, witnesses, policy=policy, client=client)


def push_tree_head(
    ledger: Ledger,
    run_id: str,
    witnesses: Sequence[WitnessEndpoint],
    *,
    size: int | None = None,
    policy: PushPolicy | None = None,
    client: httpx.Client | None = None,
) -> PushResult:
    """:func:`push_latest` for the tree head of ``size`` (default: the newest). A witness
    that already cosigned a larger head refuses a smaller one (409): tlog-witness never lets
    a witness go back."""
    if not witnesses:
        return PushResult(run_id=run_id, size=0, outcomes=())
    policy = policy or PushPolicy()
    head = ledger.latest_tree_head(run_id) if size is None else ledger.tree_head_at(run_id, size)
    own_client = client is None
    http = client or httpx.Client(timeout=policy.timeout_s)
    try:
        outcomes = tuple(_push_one(ledger, head, w, http, policy) for w in witnesses)
    finally:
        if own_client:
            http.close()
    for outcome in outcomes:
        level = logging.INFO if outcome.status in ("cosigned", "up-to-date") else logging.WARNING
        log.log(
            level,
            "witness %s, %s size %d: %s: %s",
            outcome.witness,
            run_id,
            head.size,
            outcome.status,
            outcome.detail,
        )
    return PushResult(run_id=run_id, size=head.size, outcomes=outcomes)


class BackgroundPusher:
    """Pushes runs' newest tree heads to the witnesses from one daemon thread, so that a
    caller (the recorder, after each append) never waits on a witness.

    :meth:`notify` returns at once; heads notified while a push is under way are coalesced
    into one push of the newest. With no witnesses, :meth:`notify` does nothing and no
    thread is started."""

    def __init__(
        self,
        ledger: Ledger,
        witnesses: Sequence[WitnessEndpoint],
        *,
        policy: PushPolicy | None = None,
    ) -> None:
        self._ledger = ledger
        self._witnesses = tuple(witnesses)
        self._policy = policy or PushPolicy()
        self._pending: list[str] = []
        self._wake = threading.Condition()
        self._closed = False
        self._busy = False
        self._thread: threading.Thread | None = None
        self.results: dict[str, PushResult] = {}
        """The latest result per run (read it after :meth:`close`)."""

    def notify(self, run_id: str) -> None:
        """Ask for ``run_id``'s newest head to be pushed soon."""
        if not self._witnesses:
            return
        with self._wake:
            if self._closed:
                raise RuntimeError("this BackgroundPusher is closed")
            if run_id not in self._pending:
                self._pending.append(run_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="veritrain-witness-push", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def close(self, timeout_s: float = 30.0) -> None:
        """Push what is pending, then stop; give up waiting after ``timeout_s`` (the daemon
        thread then dies with the process, and ``veritrain witness push`` catches up)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning(
                    "witness pushes still running after %.0f s; not waiting longer", timeout_s
                )

    def _work(self) -> None:
        with httpx.Client(timeout=self._policy.timeout_s) as client:
            while True:
                with self._wake:
                    while not self._pending and not self._closed:
                        self._wake.wait()
                    if not self._pending:
                        return  # closed and drained
                    run_id = self._pending.pop(0)
                try:
                    self.results[run_id] = push_latest(
                        self._ledger, run_id, self._witnesses, policy=self._policy, client=client
                    )
                except LedgerError as exc:  # the run itself could not be read: say so, go on
                    log.error("witness push of run %s failed: %s", run_id, exc)


def _push_one(
    ledger: Ledger,
    head: SignedTreeHead,
    witness: WitnessEndpoint,
    client: httpx.Client,
    policy: PushPolicy,
) -> WitnessOutcome:
    def outcome(status: Status, detail: str, http_status: int | None = None) -> WitnessOutcome:
        return WitnessOutcome(
            witness=witness.name,
            url=witness.url,
            status=status,
            size=head.size,
            detail=detail,
            http_status=http_status,
        )

    try:
        old = ledger.witnessed_size(head.run_id, witness.vkey)
        if old == head.size:
            # Our table says it cosigned this head; only the witness knows what it holds now
            # (a log rolled back to a head it once cosigned must not be called up to date).
            held = _held(ledger, head, witness, client, policy)
            if held is None:
                return outcome("up-to-date", f"holds size {old} (asked the witness)")
            old = held
        for conflict in (False, True):
            if old > head.size:
                log.error(
                    "witness %s holds run %s at size %d, beyond the log's head %d: the log was "
                    "rolled back or forked",
                    witness.name,
                    head.run_id,
                    old,
                    head.size,
                )
                return outcome(
                    "refused",
                    f"the witness has cosigned size {old}, beyond this head ({head.size}): the "
                    "log was rolled back or forked",
                    409 if conflict else None,
                )
            response = _post(client, witness, _submission(ledger, head, old), policy)
            if isinstance(response, str):
                return outcome("unreachable", response)
            if response.status_code == 200:
                ledger.add_cosignatures(head.run_id, head.size, witness.vkey, response.text)
                return outcome("cosigned", f"cosigned size {head.size} (from {old})", 200)
            if response.status_code == 409 and not conflict and _is_size(response):
                old = parse_size(response.text)  # what the witness really holds; retry once
                continue
            return outcome("refused", _answer(response), response.status_code)
        return outcome("refused", "the witness answered 409 twice; its state keeps moving", 409)
    except LedgerError as exc:  # a cosignature that does not verify, a bad 409 body, ...
        return outcome("invalid", str(exc))


def _held(
    ledger: Ledger,
    head: SignedTreeHead,
    witness: WitnessEndpoint,
    client: httpx.Client,
    policy: PushPolicy,
) -> int | None:
    """None when the witness's monitoring view is exactly ``head``; else the old size to
    submit from: the size it holds (a larger one is reported as a rollback by the caller), or
    ``head.size`` when the view cannot be read (add-checkpoint then asks: a 409 names it)."""
    try:
        view = fetch_view(
            witness,
            parse_checkpoint(open_note(head.note)[0]).origin,
            [key.vkey for key in ledger.keys(head.run_id, role=ROLE_LOG)],
            client=client,
            timeout_s=policy.timeout_s,
        )
    except WitnessViewError as exc:
        log.info("witness %s: no monitoring view (%s); asking by submission", witness.name, exc)
        return head.size
    if (
        view.checkpoint is not None
        and view.checkpoint.root_hash == head.root_hash
        and (view.size == head.size)
    ):
        return None
    return view.size


def _submission(ledger: Ledger, head: SignedTreeHead, old: int) -> bytes:
    proof: tuple[bytes, ...] = ()
    if 0 < old < head.size:
        proof = ledger.consistency_proof(head.run_id, old, head.size).hashes
    return AddCheckpoint(old_size=old, proof=proof, note=head.note).body()


def _post(
    client: httpx.Client, witness: WitnessEndpoint, body: bytes, policy: PushPolicy
) -> httpx.Response | str:
    """The witness's answer, or a line saying why there was none after every attempt."""
    failure = ""
    for attempt in range(policy.attempts):
        if attempt:
            time.sleep(policy.backoff_s * 2 ** (attempt - 1))
        try:
            response = client.post(
                witness.add_checkpoint_url,
                content=body,
                headers={"Content-Type": "text/plain; charset=utf-8"},
                timeout=policy.timeout_s,
            )
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            continue
        if response.status_code >= 500 or response.status_code == 429:
            failure = f"HTTP {response.status_code}: {_answer(response)}"
            continue
        return response
    return f"no answer after {policy.attempts} attempts: {failure}"


def _is_size(response: httpx.Response) -> bool:
    media_type = str(response.headers.get("content-type", "")).split(";")[0].strip().lower()
    return media_type == SIZE_CONTENT_TYPE


def _answer(response: httpx.Response) -> str:
    text = " ".join(response.text.split())
    return f"HTTP {response.status_code}: {text[:200]}" if text else f"HTTP {response.status_code}"
