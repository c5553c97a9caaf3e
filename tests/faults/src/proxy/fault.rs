//! The faults the proxy injects, and what arms them.

use std::time::Duration;

/// Which query arms [`Fault::DropReplyAfterCommit`] on a connection. Queries are the
/// client's simple-protocol `Query` messages and extended-protocol `Parse` messages (the
/// statement's text); tokio-postgres sends one `Parse` per `query`/`execute` of a `&str`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The nth query (counting from 1) the connection sends since it opened.
    NthQuery(u64),
    /// The first query whose text contains this.
    QueryContains(String),
}

impl Trigger {
    pub(super) fn matches(&self, nth: u64, text: &str) -> bool {
        match self {
            Trigger::NthQuery(n) => nth == *n,
            Trigger::QueryContains(part) => text.contains(part.as_str()),
        }
    }
}

/// What the proxy does to the traffic it forwards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward both ways.
    #[default]
    None,
    /// Once a connection sends a query that matches the trigger: forward the server's reply
    /// up to and including the first CommandComplete after it, withhold everything the
    /// server sends after that (ReadyForQuery included), and once the server's
    /// ReadyForQuery has arrived, close the connection: the client sees an I/O error, no
    /// SQLSTATE, although the server has committed.
    ///
    /// Why wait for ReadyForQuery: with the extended protocol (Parse/Bind/Execute/Sync, what
    /// tokio-postgres speaks) an autocommit statement's implicit transaction commits when
    /// the server processes Sync, after it has sent CommandComplete; ReadyForQuery comes
    /// after the commit. Closing at CommandComplete could close the server side before it
    /// read Sync, and the server would then roll back instead. So the client's bytes keep
    /// flowing as usual (Sync reaches the server), the server's are withheld from the
    /// CommandComplete on, and the close waits for the proof of the commit. With the simple
    /// protocol, ReadyForQuery likewise follows the commit of the query string's implicit
    /// transaction. Inside an explicit transaction block nothing has committed at that
    /// point: trigger on the COMMIT then.
    ///
    /// "First CommandComplete after the trigger" is taken literally: if the triggering
    /// statement fails, the next statement's CommandComplete on that connection is the one;
    /// a query string of several statements is cut after its first.
    DropReplyAfterCommit(Trigger),
    /// Close both sides of a connection once n bytes of server-to-client traffic (counted
    /// from the connection's start) have been forwarded on it; a connection already past n
    /// is closed when the server next sends anything.
    CloseAtByte(u64),
    /// Stop forwarding in both directions without closing: what arrives is held (as a
    /// network partition holds TCP segments) and delivered when the fault is lifted.
    Blackhole,
    /// Deliver each chunk this long after it arrived, in both directions (chunks stay
    /// pipelined: a round trip gains twice the delay).
    Delay(Duration),
    /// Once a connection sends a query that matches the trigger, that connection goes
    /// half-open: from the point [`Cut`] says, nothing more is forwarded in either direction
    /// and nothing is ever delivered later (it is discarded, not held), and neither side's
    /// close is passed on: both sockets stay open and silent until the proxy is dropped.
    /// The client sees a call that never answers; the server sees a peer that says nothing
    /// and never goes away (its kernel still acknowledges segments and keepalive probes, as
    /// a hung client process, a pooler or a stateful middlebox would). Other connections are
    /// untouched. Counted in [`Proxy::fired`] when the connection goes silent.
    HalfOpen(Trigger, Cut),
}

/// Where a [`Fault::HalfOpen`] connection goes silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// At the triggering message: the server never receives it (nor anything after it).
    Request,
    /// After the server ran the triggering statement and committed it: the client's
    /// messages keep flowing until the server's ReadyForQuery after the statement's
    /// CommandComplete (or ErrorResponse), which proves the implicit transaction ended (see
    /// [`Fault::DropReplyAfterCommit`] for why); the server's reply from that
    /// CommandComplete on is discarded. The client never learns that its call committed.
    AfterCommit,
}
