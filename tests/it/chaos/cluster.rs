//! A private PostgreSQL cluster for one test: `initdb` into a temporary
//! directory, `pg_ctl` on a free port with its socket in that directory.
//! Never the shared server other tests use, so a test may stop and crash
//! it at will. As root, the binaries run as the `postgres` user (initdb
//! refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;

use nix::unistd::{Uid, User};

/// A running private cluster; stopped (immediately) when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    owner: Option<User>,
}

/// The newest PostgreSQL server binaries installed.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries under /usr/lib/postgresql (scripts/ensure-services installs them)")
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|d| d.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
        .expect("no pg_ctl under /usr/lib/postgresql/*/bin")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// Creates and starts a cluster with trust authentication.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let owner = Uid::effective().is_root().then(|| {
            User::from_name("postgres")
                .unwrap()
                .expect("a postgres user to run PostgreSQL as")
        });
        if let Some(user) = &owner {
            std::os::unix::fs::chown(dir.path(), Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .unwrap();
        }
        let cluster = Self {
            dir,
            bin: bin_dir(),
            port: free_port(),
            owner,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        cluster.pg_start();
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A command for one of the cluster's binaries (as `postgres` when root).
    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        let mut cmd = match &self.owner {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", &user.name, "--"]).arg(&exe);
                cmd
            }
            None => Command::new(&exe),
        };
        cmd.current_dir(self.path());
        cmd
    }

    /// Runs one of the cluster's binaries; panics with its output when it fails.
    fn run(&self, program: &str, args: &[&str]) {
        let out = self.command(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server and waits until it accepts connections.
    pub fn pg_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=60",
            self.port,
            self.path().display()
        );
        let log = self.path().join("postgres.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Stops the server the hard way: no checkpoint, crash recovery at the
    /// next start (`pg_ctl stop -m immediate`).
    pub fn pg_crash(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    /// `postgres://` URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }
}
