//! The fault trials, one module per scenario (trials/<scenario>.rs), in one test binary:
//! the tests are named `trials::<scenario>::<test>`, and run side by side with the suite's
//! `--test-threads`.
//!
//! Side by side, so each scenario keeps to what is its own: databases on the shared server
//! named after it (`pgidem_faults_<scenario>_*`, `pidem_px_*` for the proxy's), throwaway
//! servers (`CrashServer`, `TempCluster`) and private Redis servers whose names start with
//! its own, scopes and application names made unique by `suite::scope`, and settings
//! changed only on its own databases (`ALTER DATABASE`) or its own throwaway servers
//! (`ALTER SYSTEM`). A fault aimed at sessions picks them by database and application
//! name, never all sessions of the shared server.

mod trials {
    mod expiry;
    mod f10_disk_full;
    mod f11_completion;
    mod f12_unknown_outcome;
    mod f13_own_holder;
    mod f1_kill_client;
    mod f2_paused_holder;
    mod f3_terminate;
    mod f4_kill_backend;
    mod f5_crash;
    mod f6_lost_reply;
    mod f7_blackhole;
    mod f8_clock;
    mod f9_failover;
    mod no_fault;
    mod proxy;
}
