//! The lines a client process prints on stdout, one per event, as soon as it happens:
//!
//! ```text
//! invoked <t> <key> begin
//! invoked <t> <key> effect <fence> <upstream_key>
//! invoked <t> <key> complete <fence> <response json>
//! returned <t> <key> claimed <fence> <attempt> <recovered> <upstream_key>
//! returned <t> <key> replay <succeeded> <response json | null>
//! returned <t> <key> in_progress
//! returned <t> <key> completed <state>
//! returned <t> <key> done
//! returned <t> <key> failed <sqlstate>
//! returned <t> <key> indeterminate <why...>
//! paused <t> <key>
//! ```
//!
//! `<t>` is microseconds since the start epoch the parent gave, so the parent can put the
//! events of every process on one clock. Keys have no spaces; a JSON document comes last
//! on its line. The parent rebuilds [`Event`]s from them with a [`Recorder`]: an
//! operation invoked by a process that died before its `returned` line is indeterminate.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::history::{Event, Op, Outcome};

/// Microseconds since `start_epoch_micros` on the wall clock (the clock every process of
/// a run shares).
pub fn since(start_epoch_micros: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    now - start_epoch_micros
}

pub fn invoked(t: i64, key: &str, op: &Op) -> String {
    let op = match op {
        Op::Begin => "begin".to_string(),
        Op::BeginRepeat => "begin_repeat".to_string(),
        Op::Effect {
            fence,
            upstream_key,
        } => format!("effect {fence} {upstream_key}"),
        Op::Complete { fence, response } => format!("complete {fence} {response}"),
        Op::Release { fence } => format!("release {fence}"),
        Op::Extend { fence } => format!("extend {fence}"),
    };
    format!("invoked {t} {key} {op}")
}

pub fn returned(t: i64, key: &str, outcome: &Outcome) -> String {
    let outcome = match outcome {
        Outcome::Claimed {
            fence,
            attempt,
            recovered,
            upstream_key,
        } => format!("claimed {fence} {attempt} {recovered} {upstream_key}"),
        Outcome::Replay {
            succeeded,
            response,
        } => format!(
            "replay {succeeded} {}",
            response.as_ref().unwrap_or(&Value::Null)
        ),
        Outcome::InProgress => "in_progress".to_string(),
        Outcome::Completed { state } => format!("completed {state}"),
        Outcome::Done => "done".to_string(),
        Outcome::Failed { sqlstate } => format!("failed {sqlstate}"),
        // One line: the reason may hold line breaks.
        Outcome::Indeterminate { why } => format!("indeterminate {}", why.replace('\n', " ")),
    };
    format!("returned {t} {key} {outcome}")
}

pub fn paused(t: i64, key: &str) -> String {
    format!("paused {t} {key}")
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Invoked {
        t: i64,
        key: String,
        op: Op,
    },
    Returned {
        t: i64,
        key: String,
        outcome: Outcome,
    },
    Paused {
        t: i64,
        key: String,
    },
}

/// Parses a line; None for anything that is not one (a line cut short by a kill).
pub fn parse(line: &str) -> Option<Line> {
    let mut words = line.splitn(4, ' ');
    let kind = words.next()?;
    let t: i64 = words.next()?.parse().ok()?;
    let key = words.next()?.to_string();
    let rest = words.next().unwrap_or("");
    let (what, args) = rest.split_once(' ').unwrap_or((rest, ""));
    match kind {
        "invoked" => Some(Line::Invoked {
            t,
            key,
            op: parse_op(what, args)?,
        }),
        "returned" => Some(Line::Returned {
            t,
            key,
            outcome: parse_outcome(what, args)?,
        }),
        "paused" => Some(Line::Paused { t, key }),
        _ => None,
    }
}

fn parse_op(what: &str, args: &str) -> Option<Op> {
    let (first, rest) = args.split_once(' ').unwrap_or((args, ""));
    Some(match what {
        "begin" => Op::Begin,
        "begin_repeat" => Op::BeginRepeat,
        "effect" => Op::Effect {
            fence: first.parse().ok()?,
            upstream_key: rest.parse().ok()?,
        },
        "complete" => Op::Complete {
            fence: first.parse().ok()?,
            response: serde_json::from_str(rest).ok()?,
        },
        "release" => Op::Release {
            fence: first.parse().ok()?,
        },
        "extend" => Op::Extend {
            fence: first.parse().ok()?,
        },
        _ => return None,
    })
}

fn parse_outcome(what: &str, args: &str) -> Option<Outcome> {
    let words: Vec<&str> = args.split(' ').collect();
    Some(match what {
        "claimed" => Outcome::Claimed {
            fence: words.first()?.parse().ok()?,
            attempt: words.get(1)?.parse().ok()?,
            recovered: words.get(2)?.parse().ok()?,
            upstream_key: words.get(3)?.parse().ok()?,
        },
        "replay" => {
            let (succeeded, response) = args.split_once(' ')?;
            let response: Value = serde_json::from_str(response).ok()?;
            Outcome::Replay {
                succeeded: succeeded.parse().ok()?,
                response: (!response.is_null()).then_some(response),
            }
        }
        "in_progress" => Outcome::InProgress,
        "completed" => Outcome::Completed {
            state: words.first()?.to_string(),
        },
        "done" => Outcome::Done,
        "failed" => Outcome::Failed {
            sqlstate: words.first()?.to_string(),
        },
        "indeterminate" => Outcome::Indeterminate {
            why: args.to_string(),
        },
        _ => return None,
    })
}

/// Rebuilds the events of one client process (or of several in turn that share its id:
/// a replacement goes on where a killed one stopped) from its lines.
#[derive(Debug)]
pub struct Recorder {
    process: usize,
    pending: Option<(i64, String, Op)>,
    pub events: Vec<Event>,
}

impl Recorder {
    pub fn new(process: usize) -> Recorder {
        Recorder {
            process,
            pending: None,
            events: Vec::new(),
        }
    }

    /// Takes one line; an unparsable one is ignored (the tail of a killed process).
    pub fn line(&mut self, line: &str) -> Option<Line> {
        let parsed = parse(line)?;
        match &parsed {
            Line::Invoked { t, key, op } => {
                self.died("invoked again without an answer");
                self.pending = Some((*t, key.clone(), op.clone()));
            }
            Line::Returned { t, key, outcome } => {
                if let Some((invoked, pending_key, op)) = self.pending.take() {
                    assert_eq!(&pending_key, key, "process {}: {line}", self.process);
                    let returned =
                        (!matches!(outcome, Outcome::Indeterminate { .. })).then_some(*t);
                    self.events.push(Event {
                        process: self.process,
                        key: key.clone(),
                        op,
                        invoked,
                        returned,
                        outcome: outcome.clone(),
                    });
                }
            }
            Line::Paused { .. } => {}
        }
        Some(parsed)
    }

    /// The process ended (exited or was killed): an operation it invoked and never saw
    /// answered may have taken effect.
    pub fn died(&mut self, why: &str) {
        if let Some((invoked, key, op)) = self.pending.take() {
            self.events.push(Event {
                process: self.process,
                key,
                op,
                invoked,
                returned: None,
                outcome: Outcome::Indeterminate {
                    why: why.to_string(),
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of line reads back as what was printed.
    #[test]
    fn lines_round_trip() {
        let u = uuid::Uuid::from_u128(7);
        let ops = [
            Op::Begin,
            Op::Effect {
                fence: 3,
                upstream_key: u,
            },
            Op::Complete {
                fence: 3,
                response: serde_json::json!({"by": 1, "note": "a b"}),
            },
        ];
        for op in ops {
            let line = invoked(12, "k1", &op);
            assert_eq!(
                parse(&line),
                Some(Line::Invoked {
                    t: 12,
                    key: "k1".into(),
                    op
                })
            );
        }
        let outcomes = [
            Outcome::Claimed {
                fence: 4,
                attempt: 2,
                recovered: true,
                upstream_key: u,
            },
            Outcome::Replay {
                succeeded: true,
                response: Some(serde_json::json!({"by": 0})),
            },
            Outcome::Replay {
                succeeded: false,
                response: None,
            },
            Outcome::InProgress,
            Outcome::Completed {
                state: "succeeded".into(),
            },
            Outcome::Done,
            Outcome::Failed {
                sqlstate: "IK003".into(),
            },
            Outcome::Indeterminate {
                why: "connection closed".into(),
            },
        ];
        for outcome in outcomes {
            let line = returned(-5, "k1", &outcome);
            assert_eq!(
                parse(&line),
                Some(Line::Returned {
                    t: -5,
                    key: "k1".into(),
                    outcome
                })
            );
        }
        assert_eq!(parse("returned 12 k1 claim"), None, "a line cut short");
    }

    /// A process that died between invoking and hearing back leaves an indeterminate event.
    #[test]
    fn recorder_marks_the_unanswered_operation() {
        let mut r = Recorder::new(2);
        r.line(&invoked(1, "k0", &Op::Begin));
        r.line(&returned(2, "k0", &Outcome::InProgress));
        r.line(&invoked(3, "k0", &Op::Begin));
        r.died("killed");
        assert_eq!(r.events.len(), 2);
        assert_eq!(r.events[0].returned, Some(2));
        assert!(r.events[1].is_indeterminate() && r.events[1].returned.is_none());
    }
}
