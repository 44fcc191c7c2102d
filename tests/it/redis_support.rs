//! Redis for the tests: a fresh key prefix on the shared Redis
//! (127.0.0.1:6379, or `ONCEGATE_TEST_REDIS_URL`), deleted on drop, and a
//! redis-server of a test's own on a free port in a temporary directory,
//! killed on drop whatever the outcome.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use oncegate::config::Config;
use oncegate::ledger::config::NamespaceRecovery;
use oncegate::ledger::Tier;

/// The shared Redis's URL.
pub fn shared_url() -> String {
    std::env::var("ONCEGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A key prefix of one test's own; its keys are deleted on drop.
pub struct Prefix {
    pub url: String,
    pub prefix: String,
}

impl Prefix {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            prefix: format!("oncegate-test:{}:", uuid::Uuid::new_v4().simple()),
        }
    }

    /// How many keys the prefix holds.
    pub fn count(&self) -> usize {
        self.keys().len()
    }

    fn keys(&self) -> Vec<String> {
        let Ok(mut conn) = redis::Client::open(self.url.as_str()).and_then(|c| c.get_connection())
        else {
            return Vec::new();
        };
        redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let keys = self.keys();
        if keys.is_empty() {
            return;
        }
        if let Ok(mut conn) =
            redis::Client::open(self.url.as_str()).and_then(|c| c.get_connection())
        {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
    }
}

/// Puts `namespace` on the Redis tier at `url` under `prefix`.
pub fn redis_tier(config: &mut Config, namespace: &str, url: &str, prefix: &str) {
    config.redis.url = Some(url.to_owned());
    config.redis.key_prefix = prefix.to_owned();
    config.redis.command_timeout_ms = 2_000;
    config.redis.connect_timeout_ms = 500;
    config.ledger.namespaces.push(NamespaceRecovery {
        namespace: namespace.to_owned(),
        stranded_after: None,
        max_reclaims: None,
        retry_window: None,
        tier: Some(Tier::Redis),
    });
}

/// A redis-server of the test's own: a free port, a temporary directory,
/// AOF on as docs/redis.md recommends (`deploy/redis/redis.conf`).
pub struct OwnRedis {
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one with the recommended config and `extra` directives.
    pub async fn start(extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut redis = Self {
            port,
            dir: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            child: None,
        };
        redis.launch().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn conf() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/redis/redis.conf")
    }

    /// Starts the server (again) on the same port and directory, and waits
    /// until it answers `PING` (having loaded its AOF).
    pub async fn launch(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut cmd = Command::new("redis-server");
        cmd.arg(Self::conf())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--logfile", ""]);
        for directive in &self.extra {
            let mut words = directive.split_whitespace();
            if let Some(name) = words.next() {
                cmd.arg(format!("--{name}")).args(words);
            }
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/ensure-services)");
        self.child = Some(child);
        let url = self.url();
        crate::harness::eventually("own redis-server answers", Duration::from_secs(20), || {
            let url = url.clone();
            async move {
                let mut conn = redis::Client::open(url).ok()?.get_connection().ok()?;
                let pong: String = redis::cmd("PING").query(&mut conn).ok()?;
                (pong == "PONG").then_some(())
            }
        })
        .await;
    }

    /// Stops it gracefully (SIGTERM: Redis writes its AOF and exits).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-server did not stop within 20 s of SIGTERM");
        }
    }

    /// Kills it (SIGKILL: no chance to write anything more).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
