//! The PostgreSQL protocol's framing, followed in both directions: where each message
//! begins and ends.

use super::*;

/// The tag given to a startup-phase message, which has no type byte.
pub(super) const STARTUP: u8 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The next message has no type byte (the client's first messages).
    Startup,
    /// The next byte is a bare answer to SSLRequest or GSSENCRequest.
    AnswerByte,
    /// Typed messages.
    Typed,
    /// Not parseable (encrypted, or not PostgreSQL): forwarded blindly.
    Opaque,
}

/// A message that ended in the chunk just fed.
#[derive(Debug)]
pub(super) struct Frame {
    /// Its type byte; `STARTUP` for a startup-phase message; the byte itself for a bare
    /// answer byte.
    pub(super) tag: u8,
    /// The answer to SSLRequest/GSSENCRequest.
    pub(super) answer: bool,
    /// Where it begins in the chunk (0 when it began in an earlier chunk).
    pub(super) start: usize,
    /// Where it ends in the chunk (one past its last byte).
    pub(super) end: usize,
    /// Its body (after the length), when asked for; a startup message's always.
    pub(super) body: Vec<u8>,
}

/// Follows message boundaries across the chunks of one direction.
pub(super) struct Framer {
    pub(super) mode: Mode,
    /// Header bytes of the current message read so far (4 in startup, 5 typed).
    pub(super) head: Vec<u8>,
    pub(super) tag: u8,
    /// Body bytes of the current message still to come.
    pub(super) left: usize,
    pub(super) keep: bool,
    pub(super) body: Vec<u8>,
    /// Where the current message began in the chunk being fed.
    pub(super) start: usize,
}

impl Framer {
    /// The client's side starts with a startup-phase message; the server's messages are all
    /// typed (but for the bare answer byte, announced by the client's side).
    pub(super) fn new(side: Side) -> Self {
        Framer {
            mode: match side {
                Side::Up => Mode::Startup,
                Side::Down => Mode::Typed,
            },
            head: Vec::with_capacity(5),
            tag: 0,
            left: 0,
            keep: false,
            body: Vec::new(),
            start: 0,
        }
    }

    /// The messages that end in `chunk`, keeping the bodies of the types `keep` names.
    pub(super) fn feed(&mut self, chunk: &[u8], keep: impl Fn(u8) -> bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut i = 0;
        // A message still open from the last chunk began before this one.
        self.start = 0;
        while i < chunk.len() {
            match self.mode {
                Mode::Opaque => break,
                Mode::AnswerByte => {
                    frames.push(Frame {
                        tag: chunk[i],
                        answer: true,
                        start: i,
                        end: i + 1,
                        body: Vec::new(),
                    });
                    i += 1;
                    self.mode = Mode::Typed;
                    continue;
                }
                Mode::Startup | Mode::Typed => {}
            }
            let startup = self.mode == Mode::Startup;
            let header = if startup { 4 } else { 5 };
            if self.head.is_empty() {
                self.start = i;
            }
            if self.head.len() < header {
                let take = (header - self.head.len()).min(chunk.len() - i);
                self.head.extend_from_slice(&chunk[i..i + take]);
                i += take;
                if self.head.len() < header {
                    break;
                }
                let (tag, len) = if startup {
                    (STARTUP, be_u32(&self.head[0..4]))
                } else {
                    (self.head[0], be_u32(&self.head[1..5]))
                };
                let len = len.unwrap_or(0) as usize;
                // A startup message is small; anything else (a TLS hello sent directly,
                // garbage) is not ours to parse.
                if len < 4 || (startup && !(8..=10_000).contains(&len)) {
                    self.mode = Mode::Opaque;
                    break;
                }
                self.tag = tag;
                self.left = len - 4;
                self.keep = startup || keep(tag);
                self.body.clear();
            }
            let take = self.left.min(chunk.len() - i);
            if self.keep {
                self.body.extend_from_slice(&chunk[i..i + take]);
            }
            i += take;
            self.left -= take;
            if self.left == 0 {
                frames.push(Frame {
                    tag: self.tag,
                    answer: false,
                    start: self.start,
                    end: i,
                    body: std::mem::take(&mut self.body),
                });
                self.head.clear();
                if startup {
                    self.mode = Mode::Typed;
                }
            }
        }
        frames
    }
}
