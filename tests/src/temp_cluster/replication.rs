//! Streaming replication between throwaway servers: a standby made from a running server
//! with `pg_basebackup -R` (the same version's program), started on a port and socket of
//! its own, promoted, and made again from whichever server is the primary now (a failed
//! primary comes back as a standby that way, as an operator would re-seed it).
//!
//! The server's defaults are enough on the primary: `wal_level = replica`,
//! `max_wal_senders = 10`, and `initdb --auth=trust` trusts replication connections on the
//! socket. The standby is a copy of the data folder, so it has the same
//! `shared_preload_libraries` and extension settings.

use std::path::PathBuf;
use std::process::Command;

use super::{is_root, run, server_command, TempCluster};

impl TempCluster {
    /// A new standby of `primary`, named `name`, streaming from it as `application_name`
    /// (the name `synchronous_standby_names` lists); started, in recovery.
    pub fn standby_of(primary: &TempCluster, name: &str, application_name: &str) -> TempCluster {
        let dir = crate::root()
            .join("target/temp-clusters")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let mut c = Command::new("chown");
            c.arg("postgres:").arg(&dir);
            run(c, "chown");
        }
        // A port nobody listens on now; it only names the socket file.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        // The standby runs as its primary does (the same environment at every start).
        let standby = TempCluster {
            dir,
            port,
            env: primary.env.clone(),
        };
        standby.copy_and_start(primary, application_name);
        standby
    }

    /// Makes this server again as a standby of `primary`: stopped if it runs (immediately:
    /// it is being thrown away), its data folder removed, copied anew and started.
    pub fn reseed_from(&self, primary: &TempCluster, application_name: &str) {
        if self.postmaster_pid().is_some() {
            self.stop_immediate();
        }
        std::fs::remove_dir_all(self.data_dir())
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", self.data_dir().display()));
        self.copy_and_start(primary, application_name);
    }

    /// Promotes this standby (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&self) {
        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "60", "promote"]);
        run(pg_ctl, "pg_ctl promote");
    }

    /// The folder of the server's socket (libpq's `host`).
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The port that names the server's socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection string a replication client uses to reach this server.
    fn replication_source(&self, application_name: &str) -> String {
        format!(
            "host={} port={} user=postgres application_name={application_name}",
            self.dir.display(),
            self.port
        )
    }

    fn copy_and_start(&self, primary: &TempCluster, application_name: &str) {
        let data: PathBuf = self.data_dir();
        let mut backup = server_command("pg_basebackup");
        backup
            .arg("-D")
            .arg(&data)
            .args(["-R", "-X", "stream", "-c", "fast", "-d"])
            .arg(primary.replication_source(application_name));
        run(backup, "pg_basebackup");
        // The copy has the primary's port and socket folder: this server's own come after
        // them in postgresql.conf (the last setting wins).
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "\nport = {}\nunix_socket_directories = '{}'\n",
            self.port,
            self.dir.display()
        ));
        std::fs::write(&conf, text).unwrap();
        self.start_again();
    }
}
