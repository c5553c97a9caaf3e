//! The words of the SQL API: what a call may pass as a policy and what a record's state and
//! a call's outcome are called. Both backends store and return exactly these.

macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every word, in the order the docs list them (the first is the default).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word as SQL takes and returns it.
            pub const fn as_sql(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }

            /// The value of a word, if it is one.
            pub fn parse(word: &str) -> Option<$name> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The words, as an error's detail lists them: "a, b, c".
            pub fn listed() -> String {
                Self::ALL.iter().map(|w| w.as_sql()).collect::<Vec<_>>().join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_sql())
            }
        }
    };
}

words! {
    /// What a repeat of a remembered call gets.
    OnCacheHit {
        /// Replay any remembered result (the default).
        ReturnCached = "return_cached",
        /// Replay a remembered success; claim a remembered failure again.
        ReturnCachedIfSuccess = "return_cached_if_success",
        /// Refuse a repeat of a completed call (IK002).
        FailFast = "fail_fast",
    }
}

words! {
    /// What a repeat with a different request gets.
    OnMismatch {
        /// IK001 (the default).
        Reject = "reject",
        /// Treated as the same call: the key alone names it.
        Ignore = "ignore",
    }
}

words! {
    /// A record's state.
    State {
        InProgress = "in_progress",
        Succeeded = "succeeded",
        Failed = "failed",
    }
}

words! {
    /// What `idem_begin` answers.
    Outcome {
        /// This call holds the key: do the work, then complete or release with the fence.
        Claimed = "claimed",
        /// The call already ran: its remembered result.
        Replay = "replay",
        /// Another attempt holds the call.
        InProgress = "in_progress",
    }
}

words! {
    /// What `idem_complete` answers: the state the completion left.
    Completion {
        Succeeded = "succeeded",
        Failed = "failed",
        /// An uncached failure: nothing is remembered, a retry runs the call again.
        Absent = "absent",
    }
}

words! {
    /// What `idem_begin_batch` answers for one item: `idem_begin`'s outcomes, and the two
    /// refusals a single call raises (IK001, IK002), here that item's answer.
    BatchOutcome {
        Claimed = "claimed",
        Replay = "replay",
        InProgress = "in_progress",
        /// The key was first used with a different request (a single call: IK001).
        Mismatch = "mismatch",
        /// A repeat of a completed call under `on_cache_hit => 'fail_fast'` (IK002).
        Refused = "refused",
    }
}

words! {
    /// What `idem_complete_batch` answers for one item.
    BatchCompletion {
        /// Recorded (or already recorded by this fence): the item's `state` says what it left.
        Completed = "completed",
        /// The fence no longer holds the record (a single call: IK003); nothing written.
        LeaseLost = "lease_lost",
    }
}

impl Completion {
    /// The state the completion leaves the record in; None: it leaves no record.
    pub const fn state(self) -> Option<State> {
        match self {
            Completion::Succeeded => Some(State::Succeeded),
            Completion::Failed => Some(State::Failed),
            Completion::Absent => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_the_default_comes_first() {
        for w in OnCacheHit::ALL {
            assert_eq!(OnCacheHit::parse(w.as_sql()), Some(*w));
        }
        assert_eq!(OnCacheHit::ALL[0], OnCacheHit::ReturnCached);
        assert_eq!(OnMismatch::ALL[0], OnMismatch::Reject);
        assert_eq!(OnMismatch::listed(), "reject, ignore");
        assert_eq!(State::parse("done"), None);
        for c in Completion::ALL {
            // A completion's word is the state it leaves, where it leaves one.
            assert_eq!(
                c.state().map(State::as_sql),
                State::parse(c.as_sql()).map(State::as_sql)
            );
        }
    }
}
