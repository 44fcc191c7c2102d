//! Runs generations of the real `oncegate serve`: each armed to kill itself
//! at a crash point after a random number of hits, restarted after every
//! death until the crash budget is spent; records which effects each death
//! caught in flight.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::db;
use crate::process::command;

/// Where and how often generations die.
#[derive(Debug, Clone)]
pub struct CrashPlan {
    /// The armed crash point (`None`: never crash).
    pub point: Option<&'static str>,
    /// Each generation dies at hit `1..=spread`, drawn at random.
    pub spread: u64,
    /// Deaths before generations run unarmed.
    pub budget: usize,
    /// Seeds the draws, so a failing run can be repeated.
    pub seed: u64,
}

/// One planned death.
#[derive(Debug, Clone)]
pub struct Crash {
    /// Idempotency keys of the effects it had leased (`sending`) when it
    /// died: sent or about to be, outcome unrecorded.
    pub in_flight: Vec<String>,
}

/// One running process.
struct Proc {
    child: Child,
    base: String,
    stderr: Arc<Mutex<VecDeque<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// Starts, watches and restarts generations of `oncegate serve`.
pub struct Supervisor {
    config: PathBuf,
    cwd: PathBuf,
    db_url: String,
    plan: CrashPlan,
    rng: ChaCha8Rng,
    proc: Option<Proc>,
    /// Processes started so far.
    pub generations: usize,
    /// Every planned death, in order.
    pub crashes: Vec<Crash>,
}

const STDERR_TAIL: usize = 40;

impl Supervisor {
    pub fn new(config: &Path, cwd: &Path, db_url: &str, plan: CrashPlan) -> Self {
        Self {
            config: config.to_owned(),
            cwd: cwd.to_owned(),
            db_url: db_url.to_owned(),
            rng: ChaCha8Rng::seed_from_u64(plan.seed),
            plan,
            proc: None,
            generations: 0,
            crashes: Vec::new(),
        }
    }

    /// The running generation's base URL, starting one if none runs.
    pub async fn base(&mut self) -> String {
        loop {
            if let Some(proc) = &self.proc {
                return proc.base.clone();
            }
            match self.spawn() {
                Ok(proc) => self.proc = Some(proc),
                Err(proc) => self.buried(proc).await,
            }
        }
    }

    /// Whether the running generation died since the last look; a death is
    /// recorded (and must be a planned one) before this returns.
    pub async fn reap(&mut self) -> bool {
        let Some(proc) = self.proc.as_mut() else {
            return false;
        };
        match proc.child.try_wait().expect("try_wait") {
            None => false,
            Some(_) => {
                let proc = self.proc.take().unwrap();
                self.buried(proc).await;
                true
            }
        }
    }

    /// Waits until no effect is pending or sending and no run is open,
    /// restarting any generation that dies meanwhile.
    pub async fn settle(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            self.base().await;
            if db::settled(&self.db_url).await {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "the outbox did not drain in {limit:?}:\n{}",
                    db::unsettled(&self.db_url).await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.reap().await;
        }
    }

    /// Stops the running generation with SIGTERM; it must exit cleanly.
    pub async fn stop(&mut self) {
        if self.reap().await {
            return;
        }
        let Some(mut proc) = self.proc.take() else {
            return;
        };
        kill(Pid::from_raw(proc.child.id() as i32), Signal::SIGTERM).unwrap();
        let status = proc.child.wait().unwrap();
        if let Some(reader) = proc.reader.take() {
            let _ = reader.join();
        }
        if status.signal() == Some(Signal::SIGKILL as i32) {
            // It reached its crash point while shutting down.
            self.record().await;
            return;
        }
        assert!(
            status.success(),
            "SIGTERM must stop oncegate cleanly: {status:?}; stderr:\n{}",
            tail(&proc)
        );
    }

    /// Crash-point settings for the next generation.
    fn arming(&mut self) -> Vec<(&'static str, String)> {
        match self.plan.point {
            Some(point) if self.crashes.len() < self.plan.budget => {
                let after = self.rng.gen_range(1..=self.plan.spread.max(1));
                vec![
                    ("ONCEGATE_CRASH_AT", point.to_owned()),
                    ("ONCEGATE_CRASH_AFTER", after.to_string()),
                ]
            }
            _ => Vec::new(),
        }
    }

    /// Starts a generation and waits for its "listening" line; `Err` holds
    /// a process that died first.
    fn spawn(&mut self) -> Result<Proc, Proc> {
        self.generations += 1;
        let mut cmd = command(&["--log-format", "json", "serve"]);
        cmd.env("ONCEGATE_CONFIG", &self.config)
            .env("ONCEGATE_LISTEN", "127.0.0.1:0")
            .current_dir(&self.cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in self.arming() {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn oncegate");
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let lines = Arc::clone(&stderr);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                    if event["message"] == "oncegate listening" {
                        let _ = tx.send(event["address"].as_str().unwrap_or_default().to_owned());
                    }
                }
                let mut lines = lines.lock().unwrap();
                if lines.len() == STDERR_TAIL {
                    lines.pop_front();
                }
                lines.push_back(line);
            }
        });
        let mut proc = Proc {
            child,
            base: String::new(),
            stderr,
            reader: Some(reader),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(20)) {
                proc.base = format!("http://{addr}");
                return Ok(proc);
            }
            if proc.child.try_wait().unwrap().is_some() {
                return Err(proc);
            }
            assert!(
                Instant::now() < deadline,
                "oncegate did not start:\n{}",
                tail(&proc)
            );
        }
    }

    /// Checks a dead process died at its crash point, then records what it
    /// left in flight.
    async fn buried(&mut self, mut proc: Proc) {
        let status: ExitStatus = proc.child.wait().unwrap();
        if let Some(reader) = proc.reader.take() {
            let _ = reader.join();
        }
        let planned = self.plan.point.is_some_and(|p| {
            let needle = format!("crash point {p} reached");
            proc.stderr
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&needle))
        });
        assert!(
            status.signal() == Some(Signal::SIGKILL as i32) && planned,
            "oncegate died, but not at its crash point: {status:?}; stderr:\n{}",
            tail(&proc)
        );
        self.record().await;
    }

    async fn record(&mut self) {
        db::wait_for_sessions_gone(&self.db_url).await;
        let in_flight = db::sending_keys(&self.db_url).await;
        self.crashes.push(Crash { in_flight });
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some(proc) = self.proc.as_mut() {
            let _ = proc.child.kill();
            let _ = proc.child.wait();
        }
    }
}

fn tail(proc: &Proc) -> String {
    proc.stderr
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}
