//! A joined wait's pass through its store's gate: what `IdempotencyStore::admit_joined_wait`
//! answers when it lets a call wait for its live holder in this process.

/// A call that joins its live holder in this process, let through to wait for it
/// ([`IdempotencyStore::admit_joined_wait`](crate::IdempotencyStore::admit_joined_wait)).
/// The call holds it while it waits and drops it when it has its answer: a store that caps
/// its waiting duplicates keeps its permit in it.
pub struct JoinedWait<'a> {
    _held: Option<Box<dyn Send + 'a>>,
}

impl<'a> JoinedWait<'a> {
    /// Admitted, holding nothing: what a store without a gate answers (the default).
    pub fn free() -> JoinedWait<'a> {
        JoinedWait { _held: None }
    }

    /// Admitted for as long as `guard` lives (a permit of the store's own gate): the call
    /// drops it when it has its answer.
    pub fn holding(guard: impl Send + 'a) -> JoinedWait<'a> {
        JoinedWait {
            _held: Some(Box::new(guard)),
        }
    }
}

impl std::fmt::Debug for JoinedWait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinedWait")
            .field("holds_a_guard", &self._held.is_some())
            .finish()
    }
}
