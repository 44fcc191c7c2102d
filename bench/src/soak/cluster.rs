//! Three `oncegate serve` processes on fixed loopback ports (so a killed
//! one restarts where nginx expects it), and Debian's nginx in front with
//! its own prefix, round-robin over the three.

use std::collections::HashMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::server::{launch, serve_command};

/// Dispatcher owner id (from its "dispatcher started" line) → instance.
pub type Owners = Arc<Mutex<HashMap<String, usize>>>;

/// One instance: its port and, while it runs, its process.
struct Instance {
    port: u16,
    child: Option<Child>,
}

/// The three instances.
pub struct Cluster {
    bin: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    instances: Vec<Instance>,
    /// Which instance each dispatcher id belongs to.
    pub owners: Owners,
    /// SIGKILLs done.
    pub kills: usize,
}

/// A free loopback port (bound, then released).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Cluster {
    /// Starts `n` instances of `bin` with `config`.
    pub fn start(bin: &Path, config: &Path, dir: &Path, n: usize) -> Result<Self> {
        let mut cluster = Self {
            bin: bin.to_owned(),
            config: config.to_owned(),
            dir: dir.to_owned(),
            instances: Vec::new(),
            owners: Arc::default(),
            kills: 0,
        };
        for _ in 0..n {
            cluster.instances.push(Instance {
                port: free_port()?,
                child: None,
            });
        }
        for i in 0..n {
            cluster.spawn(i)?;
        }
        Ok(cluster)
    }

    /// The instances' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.instances.iter().map(|i| i.port).collect()
    }

    /// Starts instance `i` on its port (retrying while the port is not
    /// free yet) and notes its dispatcher's owner id.
    fn spawn(&mut self, i: usize) -> Result<()> {
        let port = self.instances[i].port;
        let listen = format!("127.0.0.1:{port}");
        let mut tries = 0;
        let (child, _, before, rx) = loop {
            let mut cmd = serve_command(&self.bin, &self.config, &listen);
            cmd.current_dir(&self.dir);
            match launch(&mut cmd, &self.bin) {
                Ok(started) => break started,
                Err(e) if tries < 10 => {
                    tries += 1;
                    eprintln!("  soak: instance {i} did not start ({e:#}); again");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        };
        let owners = self.owners.clone();
        std::thread::spawn(move || {
            let mut shown = 0;
            for line in before.into_iter().chain(rx) {
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if event["message"] == "dispatcher started" {
                    if let Some(owner) = event["owner"].as_str() {
                        owners.lock().unwrap().insert(owner.to_owned(), i);
                    }
                }
                if shown < 3 && (event["level"] == "ERROR" || line.contains("panicked")) {
                    eprintln!("  soak: instance {i}: {line}");
                    shown += 1;
                }
            }
        });
        self.instances[i].child = Some(child);
        Ok(())
    }

    /// SIGKILLs instance `i` and starts it again on the same port.
    pub fn kill_and_restart(&mut self, i: usize) -> Result<()> {
        if let Some(mut child) = self.instances[i].child.take() {
            child.kill().context("SIGKILL")?;
            child.wait()?;
            self.kills += 1;
        }
        self.spawn(i)
    }

    /// SIGTERM to each, SIGKILL after ten seconds.
    pub fn stop(&mut self) {
        for instance in &mut self.instances {
            if let Some(child) = instance.child.as_ref() {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for instance in &mut self.instances {
            if let Some(mut child) = instance.child.take() {
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for instance in &mut self.instances {
            if let Some(mut child) = instance.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Debian's nginx, in the foreground with its own prefix; killed on drop.
pub struct Nginx {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

const NGINX: &str = "/usr/sbin/nginx";

impl Nginx {
    /// Round-robin over `ports` on a free port. A refused connection
    /// (a killed instance) is retried on the next instance by nginx; a
    /// request cut off inside an instance reaches the client as a 502.
    pub fn start(dir: &Path, ports: &[u16]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let d = dir.display();
        let servers: String = ports
            .iter()
            .map(|p| format!("    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n"))
            .collect();
        let conf = format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             upstream oncegate {{\n{servers}    keepalive 32;\n  }}\n\
             server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 1m;\n\
             location / {{\n      proxy_pass http://oncegate;\n      proxy_http_version 1.1;\n\
             proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n\
             proxy_next_upstream error timeout;\n      proxy_connect_timeout 2s;\n\
             proxy_read_timeout 30s;\n    }}\n  }}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf)?;
        let error_log = dir.join("error.log");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(&error_log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {NGINX}; run scripts/ensure-nginx"))?;
        let mut nginx = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || std::fs::read_to_string(&error_log).unwrap_or_default();
            if let Ok(Some(status)) = nginx.child.try_wait() {
                bail!("nginx exited ({status}): {}", log());
            }
            if Instant::now() > deadline {
                bail!("nginx did not listen: {}", log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(nginx)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
