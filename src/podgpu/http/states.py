"""The states of one connection (http.conn) and the events that move it, as data.

A connection is in exactly one state; `TRANSITIONS` lists every move it may make, and any other
is a bug of podgpu's (`Machine.fire` raises). What each state may hold is what the memory budget
(http.budget) counts:

- HELLO (TLS only): the ClientHello arriving, held by podgpu as bytes, at most
  tlsgate.MAX_HELLO_BYTES; no OpenSSL state yet;
- HANDSHAKE (TLS only): OpenSSL's handshake, fed at most tlsgate.MAX_HANDSHAKE_INPUT;
- IDLE: between requests; nothing held (a plain connection starts here);
- HEAD: the bytes of a request head arriving (h11 holds at most the head size limit);
- ANSWER: a whole request is being answered; reading is paused, the unsent answer is a
  memoryview of the one published body, plus what the transport could not hand to the kernel;
- LINGER: the last answer is written and our side shut (FIN, TLS close_notify first); what the
  peer still sends is read and dropped, up to a bound, until it closes, so the kernel never
  answers unread bytes with a reset that would eat the answer (RFC 9112 section 9.6);
- CLOSED: gone (reset, closed, or lost).
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    HELLO = "hello"
    HANDSHAKE = "handshake"
    IDLE = "idle"
    HEAD = "head"
    ANSWER = "answer"
    LINGER = "linger"
    CLOSED = "closed"


class Event(enum.Enum):
    HELLO_WHOLE = "hello_whole"
    """The ClientHello arrived whole: OpenSSL takes over."""
    SHAKEN = "shaken"
    BYTES = "bytes"
    """The first bytes of a request."""
    REQUEST = "request"
    """A request (or a malformed one, answered 400) is ready to be answered."""
    ANSWERED = "answered"
    """The answer is in the kernel; nothing more of a request has arrived."""
    PIPELINED = "pipelined"
    """The answer is in the kernel and bytes of the next request are already here."""
    LAST = "last"
    """An answer after which the connection closes is in the kernel."""
    CLOSE = "close"
    """Closed: politely, with a reset, or by the peer."""


S, E = State, Event
TRANSITIONS: dict[tuple[State, Event], State] = {
    (S.HELLO, E.HELLO_WHOLE): S.HANDSHAKE,
    (S.HANDSHAKE, E.SHAKEN): S.IDLE,
    (S.IDLE, E.BYTES): S.HEAD,
    (S.IDLE, E.REQUEST): S.ANSWER,
    (S.HEAD, E.REQUEST): S.ANSWER,
    (S.ANSWER, E.ANSWERED): S.IDLE,
    (S.ANSWER, E.PIPELINED): S.HEAD,
    (S.ANSWER, E.LAST): S.LINGER,
    **{(state, E.CLOSE): S.CLOSED for state in State},
}
"""Every move a connection may make: (state, event) -> next state."""


class InvalidTransition(RuntimeError):
    """An event its state does not take: a bug of podgpu's, never a peer's doing."""


class Machine:
    """One connection's state."""

    __slots__ = ("state",)

    def __init__(self, state: State) -> None:
        self.state = state

    def fire(self, event: Event) -> State:
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise InvalidTransition(f"{event.value} in state {self.state.value}")
        self.state = nxt
        return nxt
