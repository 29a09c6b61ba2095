"""The circuit breaker of one model: counts the requests actually sent and the calls they served, by kind of failure,
and stops every further request once the endpoint looks down rather than flaky.

Two streaks open it, whichever comes first: MAX_CONSECUTIVE_FAILURES calls failed in a row, or that many calls' worth
of failed requests (x GATEWAY_TRIES) in a row. A failure counts in a streak only while nothing started after it has
succeeded, so slow failures finishing after a success do not look like an outage. Once open, no request is sent:
calls waiting for a slot and calls between two tries stop at once, so a dead-but-listening endpoint receives at most
the streak plus the requests already in flight (threshold x tries + concurrency).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sim_pipeline import defaults
from sim_pipeline.errors import ModelCallError


def failure_kind(exc: BaseException) -> str:
    """A short name for why one request failed: its HTTP status where there is one, else the error's kind."""
    from sim_pipeline.models.completion import ProviderError  # a leaf module; imported here to keep this one light

    if isinstance(exc, ProviderError) and exc.status == "invalid_response":
        return "invalid response (not retried)"
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if "Timeout" in name:
        return "timeout"
    if "Connection" in name:
        return "connection error"
    if isinstance(status, int) and status >= 400:
        return f"HTTP {status}"
    return name


@dataclass
class Breaker:
    """One model's streaks of failed requests and calls, and whether it has opened."""

    name: str
    where: str = ""  # " at <api_base>", or empty
    timeout_s: float = defaults.MODEL_TIMEOUT_S
    requests_sent: int = 0  # requests started, some of which a stopped run may never have put on the wire
    requests_back: int = 0  # requests that came back, answered or failed
    calls_started: int = 0
    _last_ok_request: int = 0
    _last_ok_call: int = 0
    _failed_requests: dict[int, str] = field(default_factory=dict)  # request number -> kind
    _call_of: dict[int, int] = field(default_factory=dict)  # request number -> the call that sent it
    _failed_calls: dict[int, int] = field(default_factory=dict)  # call number -> requests it sent
    _in_flight: set[int] = field(default_factory=set)  # requests sent, not yet answered
    _open: bool = False
    _last_error: str = ""

    def guard(self) -> None:
        """Raise the breaker's message when it is open: nothing more is sent to this model."""
        if self._open:
            raise ModelCallError(self.message())

    def call_started(self) -> int:
        """Number a new call (calls are numbered as they start)."""
        self.calls_started += 1
        return self.calls_started

    def request_started(self, call: int) -> int:
        """Number a request `call` is about to send; refused once the breaker is open."""
        self.guard()
        self.requests_sent += 1
        self._in_flight.add(self.requests_sent)
        self._call_of[self.requests_sent] = call
        return self.requests_sent

    def request_ok(self, number: int) -> None:
        """A request got a valid reply: the endpoint is up, so the streak of earlier failures ends."""
        self._in_flight.discard(number)
        self.requests_back += 1
        self._last_ok_request = max(self._last_ok_request, number)
        self._failed_requests = {n: k for n, k in self._failed_requests.items() if n > self._last_ok_request}
        self._call_of = {n: c for n, c in self._call_of.items() if n > self._last_ok_request}

    def request_failed(self, number: int, exc: BaseException, *, streak: bool = True) -> None:
        """A request failed; the breaker opens when the streak of failed requests reaches its threshold (`streak`
        False: a failure that says nothing about the endpoint being down, such as a rate limit)."""
        self._in_flight.discard(number)
        self.requests_back += 1
        self._last_error = str(exc)[:200]
        if not streak or number <= self._last_ok_request:
            return
        self._failed_requests[number] = failure_kind(exc)
        if len(self._failed_requests) >= defaults.MAX_CONSECUTIVE_FAILURES * defaults.GATEWAY_TRIES:
            self._trip()

    def call_ok(self, number: int) -> None:
        """A call succeeded: earlier failed calls no longer count as a streak."""
        self._last_ok_call = max(self._last_ok_call, number)
        self._failed_calls = {n: r for n, r in self._failed_calls.items() if n > self._last_ok_call}
        self._failed_requests = {n: k for n, k in self._failed_requests.items() if n > 0 or -n > self._last_ok_call}

    def call_failed(self, number: int, requests: int, exc: BaseException) -> None:
        """A call failed after `requests` requests (0 for code called in-process); raises once the breaker opens."""
        self._last_error = str(exc)[:200]
        if number > self._last_ok_call:
            self._failed_calls[number] = requests
            if not requests:  # code called in-process: the call is its one "request"
                self._failed_requests[-number] = failure_kind(exc)
                self._call_of[-number] = number
            if len(self._failed_calls) >= defaults.MAX_CONSECUTIVE_FAILURES:
                self._trip()
        self.guard()

    def _trip(self) -> None:
        self._open = True

    def message(self) -> str:
        """What the breaker saw: the failed requests in a row by kind, the calls they served, every request to the
        model that came back (the streak and the earlier ones), and those still in flight when it was said."""
        kinds = ", ".join(f"{count} {kind}" for kind, count in Counter(self._failed_requests.values()).most_common())
        calls = {self._call_of[n] for n in self._failed_requests if n in self._call_of}
        done = {n: r for n, r in self._failed_calls.items() if n in calls}
        tries = sorted(set(done.values()))
        given_up = (f"{len(done)} of them failed after {tries[0]} {'try' if tries[0] == 1 else 'tries'}" if len(tries) == 1
                    else f"{len(done)} of them failed after {tries[0]} to {tries[-1]} tries" if tries else "")
        given_up = given_up.replace(f"{len(calls)} of them failed after", "each failed after") if len(done) == len(
            calls) else given_up
        flying = len(self._in_flight)
        return (f"model '{self.name}'{self.where}: {len(self._failed_requests)} requests failed in a row ({kinds}) "
                f"over {len(calls)} calls{f' ({given_up})' if given_up else ''}, so the circuit breaker stopped the "
                f"run; {self.requests_back} requests to it came back in all"
                + (f", {flying} more were in flight" if flying else "")
                + f" (last: {self._last_error}). Fix: check that the endpoint is up and answers within "
                f"timeout_s={self.timeout_s:g} s, then re-run")
