//! A throwaway PostgreSQL server for tests that need a server set up differently from the
//! one under test (no preloaded library, say): the same binaries and extension files, its
//! own data folder under target/, a socket only, stopped and removed when dropped.

use std::path::PathBuf;
use std::process::Command;

use crate::{bindir, connect, root};

mod replication;

pub struct TempCluster {
    dir: PathBuf,
    port: u16,
    /// Environment variables the server is started with (every start, restarts included).
    env: Vec<(String, String)>,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a server program as the cluster's OS user: postgres when we are root (initdb
/// refuses root), ourselves otherwise.
fn server_command(program: &str) -> Command {
    let path = format!("{}/{program}", bindir());
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(path)
    }
}

fn run(mut cmd: Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TempCluster {
    /// Starts a new server named `name`. It finds the extension where the server under test
    /// does (its extension_control_path and dynamic_library_path); `conf` lines are added.
    pub fn start(name: &str, conf: &[&str]) -> TempCluster {
        TempCluster::start_with_env(name, conf, &[])
    }

    /// [`TempCluster::start`], the server (postmaster, and so every process it forks)
    /// started with these environment variables, e.g. `LD_PRELOAD` of a library that fakes
    /// its clock; initdb runs without them.
    pub fn start_with_env(name: &str, conf: &[&str], env: &[(&str, &str)]) -> TempCluster {
        TempCluster::start_with_initdb(name, conf, env, &[])
    }

    /// [`TempCluster::start_with_env`], initdb given these arguments too (e.g. `--waldir`
    /// on a volume of its own, `--wal-segsize`).
    pub fn start_with_initdb(
        name: &str,
        conf: &[&str],
        env: &[(&str, &str)],
        initdb_args: &[&str],
    ) -> TempCluster {
        let dir = root()
            .join("target/temp-clusters")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:").arg(&dir);
                    c
                },
                "chown",
            );
        }
        // A port nobody listens on now; it only names the socket file.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let data = dir.join("data");
        let mut initdb = server_command("initdb");
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
        ]);
        initdb.args(initdb_args);
        run(initdb, "initdb");

        let mut lines = vec![
            format!("port = {port}"),
            "listen_addresses = ''".into(),
            format!("unix_socket_directories = '{}'", dir.display()),
        ];
        let mut server = connect();
        for row in server
            .query(
                "SELECT name, setting FROM pg_settings \
                 WHERE name IN ('extension_control_path', 'dynamic_library_path')",
                &[],
            )
            .unwrap()
        {
            let (name, setting): (String, String) = (row.get(0), row.get(1));
            lines.push(format!("{name} = '{}'", setting.replace('\'', "''")));
        }
        lines.extend(conf.iter().map(|l| l.to_string()));
        let conf_file = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_file).unwrap();
        text.push_str(&lines.join("\n"));
        text.push('\n');
        std::fs::write(&conf_file, text).unwrap();

        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "start"]);
        pg_ctl.envs(env.iter().copied());
        run(pg_ctl, "pg_ctl start");
        TempCluster {
            dir,
            port,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The server's data folder.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The postmaster's process id (the first line of postmaster.pid), while it runs.
    pub fn postmaster_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops the server as a crash would leave it: `pg_ctl stop -m immediate` (no
    /// checkpoint; every process ends at once; the next start runs crash recovery).
    pub fn stop_immediate(&self) {
        self.pg_ctl_stop("immediate");
    }

    /// Starts the stopped server again, waiting until it accepts connections.
    pub fn start_again(&self) {
        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", "60", "start"]);
        pg_ctl.envs(self.env.iter().map(|(k, v)| (k, v)));
        run(pg_ctl, "pg_ctl start");
    }

    /// Whether the postmaster runs (`pg_ctl status`): false once it has exited, e.g. after
    /// a crash recovery that could not finish.
    pub fn is_running(&self) -> bool {
        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl.arg("-D").arg(self.data_dir()).arg("status");
        pg_ctl.output().map(|o| o.status.success()).unwrap_or(false)
    }

    /// A clean restart (`-m fast`), e.g. for a setting read only when the server starts.
    pub fn restart(&self) {
        self.pg_ctl_stop("fast");
        self.start_again();
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "-t", "60", "stop"]);
        run(pg_ctl, &format!("pg_ctl stop -m {mode}"));
    }

    /// A connection string to database `db` of this server.
    pub fn dsn(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.dir.display(),
            self.port
        )
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        let mut pg_ctl = server_command("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"]);
        let _ = pg_ctl.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
