//! pg_dump / pg_restore bring back the records and a fence sequence above every fence issued,
//! for either backend (the extension marks its tables for dumping; the portable variant's
//! are ordinary tables).

use std::process::Command;

use pg_idempotency_tests::*;

#[test]
fn records_and_fences_survive_dump_and_restore() {
    let src_dsn = fresh_database("pgidem_dump_src");
    let dst_dsn = fresh_database("pgidem_dump_dst");
    install(&src_dsn);
    let mut src = connect_to(&src_dsn);
    let done = begin(&mut src, "dump", "done");
    complete(
        &mut src,
        "dump",
        "done",
        done.fence.unwrap(),
        r#"{"kept": true}"#,
    )
    .unwrap();
    let running = begin(&mut src, "dump", "running");
    for i in 0..20 {
        begin(&mut src, "dump", &format!("filler-{i}"));
    }
    let max_fence: i64 = src
        .query_one("SELECT max(fence) FROM idempotency.records", &[])
        .unwrap()
        .get(0);
    drop(src);

    let file = std::env::temp_dir().join(format!("pgidem-dump-{}.custom", std::process::id()));
    let status = Command::new(format!("{}/pg_dump", bindir()))
        .args(["-Fc", "-f", file.to_str().unwrap(), "-d", &src_dsn])
        .status()
        .unwrap();
    assert!(status.success(), "pg_dump failed");
    let status = Command::new(format!("{}/pg_restore", bindir()))
        .args(["--exit-on-error", "-d", &dst_dsn, file.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "pg_restore failed");
    let _ = std::fs::remove_file(&file);

    let mut dst = connect_to(&dst_dsn);
    let replay = begin(&mut dst, "dump", "done");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response.as_deref(), Some(r#"{"kept": true}"#));
    assert_eq!(replay.upstream_key, done.upstream_key);
    let dup = begin(&mut dst, "dump", "running");
    assert_eq!(dup.outcome, "in_progress");
    assert_eq!(dup.upstream_key, running.upstream_key);
    let fresh = begin(&mut dst, "dump", "new");
    assert!(
        fresh.fence.unwrap() > max_fence,
        "fence {:?} not above {max_fence}",
        fresh.fence
    );
    let rows: i64 = dst
        .query_one("SELECT count(*) FROM idempotency.records", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 23);
    drop(dst);
    drop_database("pgidem_dump_src");
    drop_database("pgidem_dump_dst");
}
