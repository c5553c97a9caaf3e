//! What the proxy reads in the traffic it forwards: the startup, the queries and their
//! triggers on the way up, the commits and the ends of exchanges on the way down.

use super::*;

pub(super) const SSL_REQUEST: u32 = 80877103;
pub(super) const GSSENC_REQUEST: u32 = 80877104;
pub(super) const CANCEL_REQUEST: u32 = 80877102;

/// Client to server: follows the startup, counts the exchanges that end in ReadyForQuery,
/// and arms DropReplyAfterCommit at its trigger. Everything is forwarded; the arming
/// happens before the triggering message reaches the server, so before any reply to it.
pub(super) fn inspect_up(
    framer: &mut Framer,
    bytes: &[u8],
    conn: &Conn,
    ctl: &Control,
    control: &watch::Sender<Control>,
    stats: &Stats,
) -> Verdict {
    let mut st = conn.state.lock().unwrap();
    if st.opaque {
        framer.mode = Mode::Opaque;
    }
    for frame in framer.feed(bytes, |tag| matches!(tag, b'Q' | b'P')) {
        match frame.tag {
            STARTUP => match be_u32(&frame.body) {
                Some(SSL_REQUEST | GSSENC_REQUEST) => {
                    // Answered by one bare byte; a refused client then sends its startup.
                    st.answer_byte_next = true;
                    framer.mode = Mode::Startup;
                }
                // A cancel request is the connection's only message.
                Some(CANCEL_REQUEST) => framer.mode = Mode::Opaque,
                // The startup's exchange ends with the server's first ReadyForQuery.
                _ => st.cycles += 1,
            },
            b'Q' | b'P' => {
                st.queries += 1;
                if st.half_open_at.is_none() {
                    if let Fault::HalfOpen(trigger, cut) = &ctl.fault {
                        if trigger.matches(st.queries, &query_text(frame.tag, &frame.body))
                            && claim(control, ctl)
                        {
                            if *cut == Cut::Request {
                                // The bytes before this message go; it and the rest never.
                                st.silent = true;
                                stats.fired.fetch_add(1, Ordering::SeqCst);
                                return Verdict {
                                    forward: frame.start,
                                    close: false,
                                    fired: false,
                                };
                            }
                            st.half_open_at = Some(st.cycles);
                        }
                    }
                }
                if st.armed_at.is_none() {
                    if let Fault::DropReplyAfterCommit(trigger) = &ctl.fault {
                        if trigger.matches(st.queries, &query_text(frame.tag, &frame.body))
                            && claim(control, ctl)
                        {
                            // The replies to this message follow the ReadyForQuery of every
                            // exchange before it.
                            st.armed_at = Some(st.cycles);
                        }
                    }
                }
                if frame.tag == b'Q' {
                    st.cycles += 1;
                }
            }
            b'S' | b'F' => st.cycles += 1,
            _ => {}
        }
    }
    Verdict {
        forward: bytes.len(),
        close: false,
        fired: false,
    }
}

/// Server to client: cuts a dropped reply after its CommandComplete and closes at the
/// ReadyForQuery that proves the commit; closes at a byte limit.
pub(super) fn inspect_down(
    framer: &mut Framer,
    bytes: &[u8],
    conn: &Conn,
    ctl: &Control,
    control: &watch::Sender<Control>,
    stats: &Stats,
) -> Verdict {
    let mut st = conn.state.lock().unwrap();
    if std::mem::take(&mut st.answer_byte_next) {
        framer.mode = Mode::AnswerByte;
    }
    let was_dropping = st.dropping;
    // A reply being dropped or cut (half-open) forwards nothing more.
    let mut forward = if was_dropping || st.half_open_next {
        0
    } else {
        bytes.len()
    };
    let mut close = false;
    for frame in framer.feed(bytes, |_| false) {
        if frame.answer {
            if frame.tag != b'N' {
                // TLS or GSS encryption follows: nothing more can be parsed either way.
                st.opaque = true;
                framer.mode = Mode::Opaque;
            }
            continue;
        }
        // HalfOpen(_, AfterCommit): nothing from the statement's CommandComplete (or
        // error) on reaches the client; at the ReadyForQuery that follows, silence.
        if matches!(frame.tag, b'C' | b'E')
            && !st.half_open_next
            && st.half_open_at.is_some_and(|k| st.ready_seen >= k)
        {
            st.half_open_next = true;
            forward = forward.min(frame.start);
        }
        if frame.tag == b'Z' && st.half_open_next {
            st.ready_seen += 1;
            st.silent = true;
            stats.fired.fetch_add(1, Ordering::SeqCst);
            return Verdict {
                forward,
                close: false,
                fired: false,
            };
        }
        match frame.tag {
            b'C' if !st.dropping && st.armed_at.is_some_and(|k| st.ready_seen >= k) => {
                st.dropping = true;
                st.armed_at = None;
                forward = frame.end;
            }
            b'Z' => {
                st.ready_seen += 1;
                if st.dropping {
                    close = true;
                    break;
                }
            }
            _ => {}
        }
    }
    if close {
        return Verdict {
            forward,
            close: true,
            fired: true,
        };
    }
    if let Fault::CloseAtByte(limit) = ctl.fault {
        let room = limit.saturating_sub(st.down_bytes);
        if forward as u64 >= room && claim(control, ctl) {
            st.down_bytes += room;
            return Verdict {
                forward: room as usize,
                close: true,
                fired: true,
            };
        }
    }
    st.down_bytes += forward as u64;
    Verdict {
        forward,
        close: false,
        fired: false,
    }
}

pub(super) fn be_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// The SQL of a Query (a C string) or a Parse (statement name, then the SQL: C strings).
pub(super) fn query_text(tag: u8, body: &[u8]) -> String {
    let mut parts = body.split(|b| *b == 0);
    if tag == b'P' {
        parts.next();
    }
    String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned()
}
