//! The checker's own tests, on hand-written histories (no database): the invariants'
//! checks (checker/check.rs) and the direct checks of a failover (checker/after_failover.rs).
//! Named `checker::<module>::<test>`.

mod checker {
    mod after_failover;
    mod check;
}
