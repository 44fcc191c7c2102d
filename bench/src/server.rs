//! The real `oncegate serve` as a child process on 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// The Stripe signing secret of the benchmark's webhook source.
pub const STRIPE_SECRET: &str = "whsec_oncegate_bench";
/// The workflow token the load generator presents.
pub const TOKEN: &str = "og_bench_token_not_a_secret_0123456789abcdefghij";

/// A running server.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

/// How to start it.
pub struct ServerSpec<'a> {
    /// The `oncegate` binary.
    pub bin: &'a Path,
    /// Its database.
    pub db_url: &'a str,
    /// `database.max_connections`.
    pub max_connections: u32,
    /// Extra `ONCEGATE_*` variables (`NAME=value`).
    pub env: &'a [String],
    /// TOML appended to the server's configuration (more targets, proxies).
    pub extra_config: &'a str,
}

impl Server {
    /// Starts the server and waits for its "listening" line.
    pub fn start(spec: &ServerSpec<'_>) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("oncegate.toml");
        let text = config_text(spec.db_url, spec.max_connections) + spec.extra_config;
        std::fs::write(&config, text)?;
        let mut cmd = serve_command(spec.bin, &config, "127.0.0.1:0");
        cmd
            // Forwards would go to a target that is not there; the
            // benchmark measures acceptance, not dispatch.
            .env("ONCEGATE_DISPATCHER_ENABLED", "false")
            .current_dir(dir.path());
        for pair in spec.env {
            let (k, v) = pair
                .split_once('=')
                .with_context(|| format!("--server-env {pair:?} is not NAME=value"))?;
            cmd.env(k, v);
        }
        let (child, addr, _, rx) = launch(&mut cmd, spec.bin)?;
        eprintln!("  server pid {} on {addr}", child.id());
        // Keep draining stderr so the server never blocks on a full pipe;
        // show its first errors (a wrong answer's cause is in them).
        std::thread::spawn(move || {
            let mut shown = 0;
            for line in rx {
                if shown < 5 && (line.contains("\"level\":\"ERROR\"") || line.contains("panicked"))
                {
                    eprintln!("  server: {line}");
                    shown += 1;
                }
            }
        });
        Ok(Self {
            child,
            addr,
            _dir: dir,
        })
    }

    /// Peak resident set size so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmHWM in /proc/<pid>/status")
    }

    /// SIGTERM, then SIGKILL if it has not exited within ten seconds.
    pub fn stop(mut self) -> Result<()> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `oncegate --log-format json serve` with `config` on `listen`, none of
/// this process's `ONCEGATE_*` variables, stderr piped.
pub fn serve_command(bin: &Path, config: &Path, listen: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--log-format", "json", "serve"]);
    for (name, _) in std::env::vars() {
        if name.starts_with("ONCEGATE_") || name == "RUST_LOG" {
            cmd.env_remove(name);
        }
    }
    cmd.env("ONCEGATE_CONFIG", config)
        .env("ONCEGATE_LISTEN", listen)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Spawns `cmd` (an `oncegate serve` with piped stderr) and waits up to
/// two minutes for its "listening" line: the child, its address, the lines
/// before it, and the rest of stderr as it comes.
pub fn launch(
    cmd: &mut Command,
    bin: &Path,
) -> Result<(
    Child,
    std::net::SocketAddr,
    Vec<String>,
    mpsc::Receiver<String>,
)> {
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().context("no stderr")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("oncegate did not start: {}", seen.join("\n"));
        };
        if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
            if event["message"] == "oncegate listening" {
                let addr = event["address"].as_str().context("no address")?.parse()?;
                return Ok((child, addr, seen, rx));
            }
        }
        seen.push(line);
    }
}

fn config_text(db_url: &str, max_connections: u32) -> String {
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(TOKEN.as_bytes())));
    format!(
        "[database]\nurl = \"{db_url}\"\nmax_connections = {max_connections}\n\n\
         [[tokens]]\nsubject = \"bench\"\ndigest = \"{digest}\"\nscopes = [\"workflow\", \"proxy\"]\n\n\
         [[targets]]\nname = \"n8n\"\nbase_url = \"http://127.0.0.1:9/webhook\"\nkind = \"workflow\"\n\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         target = \"n8n\"\n"
    )
}

/// The `oncegate` binary beside this one (same profile).
pub fn default_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("oncegate")))
        .unwrap_or_else(|| PathBuf::from("target/release/oncegate"))
}

/// `chosen`, else [`default_bin`], checked to exist.
///
/// # Errors
/// It does not exist (not built yet).
pub fn server_bin(chosen: Option<&Path>) -> Result<PathBuf> {
    let bin = chosen.map_or_else(default_bin, Path::to_path_buf);
    if !bin.exists() {
        bail!(
            "{} does not exist: build it first (`cargo build --release --workspace --bins`)",
            bin.display()
        );
    }
    Ok(bin)
}
