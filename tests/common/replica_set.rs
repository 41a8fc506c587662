//! Several `ferry gateway` replicas on one private PostgreSQL cluster, each reaching it
//! through a [`TcpProxy`] of its own, and the faults a test inflicts on them: `kill -9` and a
//! restart on the same home, `SIGSTOP` then `SIGCONT`, the replica's database connection cut
//! or black-holed, PostgreSQL restarted. Also what a test asks of them: `/healthz` (leases,
//! ingress), and counts read from the database itself.

// Each test crate that includes this file uses a different part of it.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ferry_fakes::{FakeOpenAi, PrivateCluster, TcpProxy};

use crate::daemon::{Daemon, PATIENCE, channel_in_state, spawn_gateway};

/// A fault, as [`ReplicaSet::inflict`] carries it out.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// SIGKILL, then a restart on the same home after `down`.
    Kill { down: Duration },
    /// SIGSTOP for `frozen`, then SIGCONT.
    Stop { frozen: Duration },
    /// The replica's connections to the database reset (or, with `blackhole`, silenced) for
    /// `cut`.
    CutDatabase { cut: Duration, blackhole: bool },
    /// `pg_ctl restart` of the cluster under every replica.
    RestartPostgres,
}

struct Replica {
    home: Option<tempfile::TempDir>,
    daemon: Option<Daemon>,
    proxy: TcpProxy,
    /// Its `ferry.toml` (the gateway port is put in front at each start).
    config: String,
}

/// The replicas, the cluster they share, and the model they all ask.
pub struct ReplicaSet {
    pub cluster: PrivateCluster,
    pub openai: Arc<FakeOpenAi>,
    replicas: Vec<Replica>,
    /// The channels each replica must show running before it counts as up.
    channels: Vec<&'static str>,
    /// The test's own connection to the database, kept between questions; opened again
    /// after PostgreSQL restarts.
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl ReplicaSet {
    /// Starts `count` replicas with `[state]` on `cluster` (through a proxy each, leases of
    /// `lease_seconds` renewed every second) followed by `config`; returns once each shows
    /// every one of `channels` running.
    pub async fn start(
        cluster: PrivateCluster,
        openai: Arc<FakeOpenAi>,
        count: usize,
        lease_seconds: u64,
        config: &str,
        channels: &[&'static str],
    ) -> Self {
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
        let mut replicas = Vec::with_capacity(count);
        for _ in 0..count {
            let proxy = TcpProxy::start(upstream).await.expect("a proxy to PostgreSQL");
            let config = format!(
                "[state]\nbackend = \"postgres\"\npostgres_url = \"{}\"\nlease_seconds = {lease_seconds}\n\
                 renew_seconds = 1\n\n{config}",
                proxy.rewrite_url(cluster.url())
            );
            replicas.push(Replica { home: Some(tempfile::tempdir().expect("a home")), daemon: None, proxy, config });
        }
        let mut set =
            Self { cluster, openai, replicas, channels: channels.to_vec(), client: tokio::sync::Mutex::new(None) };
        for index in 0..count {
            set.spawn(index);
        }
        for index in 0..count {
            set.wait_up(index).await;
        }
        set
    }

    /// Runs `ferry <args>` (a one-shot command such as `cron add`) against the shared
    /// database, with replica 0's config; returns its stdout, or panics with its stderr.
    pub fn command(&self, args: &[&str]) -> String {
        let config = self.replicas[0].config.clone();
        let home = tempfile::tempdir().expect("a home for the command");
        let path = home.path().join("ferry.toml");
        std::fs::write(&path, config).expect("the command's config");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_ferry"))
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_clear()
            .env("HOME", home.path())
            .output()
            .expect("run ferry");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "ferry {args:?} failed: {}{stdout}", String::from_utf8_lossy(&output.stderr));
        stdout
    }

    /// The first column of each row `sql` returns, as text.
    pub async fn rows(&self, sql: &str) -> Vec<String> {
        let client = self.cluster.connect().await;
        let rows = client.query(sql, &[]).await.unwrap_or_else(|error| panic!("{sql}: {error}"));
        rows.iter().map(|row| row.get::<_, String>(0)).collect()
    }

    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Starts replica `index` on its home, its stderr appended to `<home>/stderr.log`.
    fn spawn(&mut self, index: usize) {
        let replica = &mut self.replicas[index];
        let home = replica.home.take().expect("the replica is down");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.path().join("stderr.log"))
            .expect("the replica's log");
        let (child, port) = spawn_gateway(home.path(), &replica.config, &self.openai, Stdio::from(log));
        replica.daemon = Some(Daemon { child, port, home: Some(home) });
    }

    async fn wait_up(&self, index: usize) {
        let port = self.port(index).expect("the replica runs");
        for channel in &self.channels {
            channel_in_state(port, channel, "running").await;
        }
    }

    fn port(&self, index: usize) -> Option<u16> {
        self.replicas[index].daemon.as_ref().map(|daemon| daemon.port)
    }

    fn pid(&self, index: usize) -> u32 {
        self.replicas[index].daemon.as_ref().expect("the replica runs").child.id()
    }

    /// Replica `index`'s `/healthz`, or `None` if it does not answer within 2 s.
    pub async fn health(&self, index: usize) -> Option<serde_json::Value> {
        let port = self.port(index)?;
        let url = format!("http://127.0.0.1:{port}/healthz");
        let answer = tokio::time::timeout(Duration::from_secs(2), async { reqwest::get(&url).await?.json().await });
        answer.await.ok()?.ok()
    }

    /// The replica holding the most session leases now, if any holds one.
    pub async fn busiest(&self) -> Option<usize> {
        let mut busiest = None;
        let mut most = 0;
        for index in 0..self.len() {
            let held = self.health(index).await.and_then(|health| health["replica"]["sessionLeases"].as_u64());
            if let Some(held) = held.filter(|held| *held > most) {
                most = held;
                busiest = Some(index);
            }
        }
        busiest
    }

    /// Whether replica `index` holds an ingress lease whose name starts with `prefix`.
    pub async fn holds_ingress(&self, index: usize, prefix: &str) -> bool {
        let Some(health) = self.health(index).await else { return false };
        health["replica"]["ingress"]
            .as_array()
            .is_some_and(|held| held.iter().any(|lease| lease["name"].as_str().is_some_and(|n| n.starts_with(prefix))))
    }

    /// Waits until some replica holds the ingress `prefix…` and answers for it.
    pub async fn wait_for_healthy_ingress(&self, prefix: &str) -> usize {
        tokio::time::timeout(PATIENCE, async {
            loop {
                for index in 0..self.len() {
                    if self.holds_ingress(index, prefix).await {
                        return index;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no replica took the ingress {prefix}…"))
    }

    /// One number from the database, asked directly (not through any replica's proxy);
    /// `None` while it cannot be reached.
    async fn count(&self, sql: &str, parameter: &str) -> Option<i64> {
        let mut client = self.client.lock().await;
        if client.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
            *client = Some(self.cluster.try_connect().await.ok()?);
        }
        let row = client.as_ref()?.query_one(sql, &[&parameter]).await.ok()?;
        row.try_get::<_, i64>(0).ok()
    }

    /// How many delivery records contain `needle`.
    pub async fn ledger_count(&self, needle: &str) -> i64 {
        let pattern = format!("%{}%", needle.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        self.count("SELECT count(*) FROM delivery_records WHERE body LIKE $1", &pattern).await.unwrap_or(0)
    }

    /// Each journaled message's channel and prompt, in the order the journal took them in
    /// (the order their session's holder runs them).
    pub async fn journal(&self) -> Vec<(String, String)> {
        let client = self.cluster.connect().await;
        let rows =
            client.query("SELECT channel, prompt FROM inbound_journal ORDER BY id", &[]).await.expect("the journal");
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    }

    /// Waits up to `patience` for a reply's finals to be recorded anew.
    pub async fn wait_for_new_finals(&self, patience: Duration) {
        let before = self.ledger_count("\"event\":\"finals\"").await;
        let _ = tokio::time::timeout(patience, async {
            while self.ledger_count("\"event\":\"finals\"").await <= before {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    /// Waits until the journal holds `count` messages from `channel`.
    pub async fn wait_for_journaled(&self, channel: &str, count: usize) {
        let sql = "SELECT count(*) FROM inbound_journal WHERE channel = $1";
        let reached = tokio::time::timeout(PATIENCE, async {
            while self.count(sql, channel).await.unwrap_or(0) < count as i64 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(reached.is_ok(), "{count} {channel} messages were sent, but the journal never held them all");
    }

    /// Carries `fault` out on replica `index` (or, for PostgreSQL, under all of them), and
    /// returns once it is over: the replica restarted and up, running again, reconnected.
    pub async fn inflict(&mut self, index: usize, fault: Fault) {
        match fault {
            Fault::Kill { down } => {
                let daemon = self.replicas[index].daemon.take().expect("the replica runs");
                self.replicas[index].home = Some(daemon.crash());
                tokio::time::sleep(down).await;
                self.spawn(index);
                self.wait_up(index).await;
            }
            Fault::Stop { frozen } => {
                let pid = self.pid(index).to_string();
                signal("-STOP", &pid);
                tokio::time::sleep(frozen).await;
                signal("-CONT", &pid);
            }
            Fault::CutDatabase { cut, blackhole } => {
                let proxy = &self.replicas[index].proxy;
                if blackhole {
                    proxy.blackhole();
                } else {
                    proxy.cut();
                }
                tokio::time::sleep(cut).await;
                proxy.restore();
            }
            Fault::RestartPostgres => self.cluster.restart().await,
        }
    }

    /// Keeps every replica's home (config, `stderr.log`) after the test, for a post-mortem;
    /// returns where they are.
    pub fn keep_homes(&mut self) -> Vec<std::path::PathBuf> {
        self.replicas
            .iter_mut()
            .filter_map(|replica| {
                let home = replica.daemon.as_mut().and_then(|daemon| daemon.home.take()).or(replica.home.take())?;
                Some(home.keep())
            })
            .collect()
    }

    /// Lines of replica `index`'s log at WARN or ERROR, the last `limit` of them.
    pub fn trouble(&self, index: usize, limit: usize) -> Vec<String> {
        self.log_lines(index, limit, |line| line.contains(" WARN ") || line.contains(" ERROR "))
    }

    /// Lines of replica `index`'s log that contain `needle`, the last `limit` of them.
    pub fn lines_about(&self, index: usize, needle: &str, limit: usize) -> Vec<String> {
        self.log_lines(index, limit, |line| line.contains(needle))
    }

    fn log_lines(&self, index: usize, limit: usize, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let replica = &self.replicas[index];
        let home = replica.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).or(replica.home.as_ref());
        let Some(home) = home else { return Vec::new() };
        let log = std::fs::read_to_string(home.path().join("stderr.log")).unwrap_or_default();
        let lines: Vec<String> = log.lines().filter(|line| keep(line)).map(str::to_owned).collect();
        lines[lines.len().saturating_sub(limit)..].to_vec()
    }
}

impl Drop for ReplicaSet {
    /// A test that failed keeps the replicas' homes (config, `stderr.log`) for a post-mortem.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the replicas' homes, kept after the failure: {:?}", self.keep_homes());
        }
    }
}

/// `kill <signal> <pid>`.
fn signal(signal: &str, pid: &str) {
    let status = Command::new("kill").args([signal, pid]).status().expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}
