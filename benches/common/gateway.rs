//! The real `ferry gateway` binary for the end-to-end adapter benches: started in a fresh
//! home with one channel configured against its fake, each chat its own session
//! (`dm_scope = "per-peer"`), the offline echo provider as an instant model. Shared by the
//! Telegram, Discord, Slack and burst benches (`#[path]`-included).

// Each bench that includes this file uses a different part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running gateway; killed when dropped.
pub struct BenchGateway {
    child: Child,
    _home: tempfile::TempDir,
}

impl BenchGateway {
    /// Starts the gateway with `channel` (a `[channels.<name>]` section, header included).
    /// `FERRY_BENCH_LOG=info` shows its log.
    pub fn start(channel: &str) -> Self {
        Self::start_with(&format!("[session]\ndm_scope = \"per-peer\"\n\n{channel}"))
    }

    /// Starts the gateway with exactly `config` (plus its port): the defaults apply to
    /// everything it leaves out, `dm_scope` included.
    pub fn start_with(config: &str) -> Self {
        let home = tempfile::tempdir().expect("home");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("port").port();
        let config = format!("[gateway]\nport = {port}\n\n{config}");
        std::fs::write(home.path().join("ferry.toml"), config).expect("config");
        let log = std::env::var("FERRY_BENCH_LOG").ok();
        let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .arg("gateway")
            .env_clear()
            .env("HOME", home.path())
            .env("RUST_LOG", log.as_deref().unwrap_or("warn"))
            .current_dir(home.path())
            .stdout(Stdio::null())
            .stderr(if log.is_some() { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("start ferry gateway");
        Self { child, _home: home }
    }

    /// The gateway process's resident memory now (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// The processes the gateway has started and not yet reaped (those of all its threads).
    pub fn children(&self) -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.child.id())) else { return Vec::new() };
        tasks
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|pids| pids.split_whitespace().filter_map(|pid| pid.parse().ok()).collect::<Vec<u32>>())
            .collect()
    }

    /// The CPU time the gateway process has used so far, all its threads, user and system
    /// (`/proc/<pid>/stat`, in clock ticks of 10 ms: meant for differences over many messages).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command name (which may hold spaces) end at its last ')':
        // state is the first, utime and stime the 12th and 13th.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let ticks = |index: usize| fields.get(index).and_then(|value| value.parse::<u64>().ok()).unwrap_or(0);
        // USER_HZ is 100 on every Linux the kernel ABI allows.
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }

    /// Prints the gateway's peak and current resident memory.
    pub fn report_memory(&self) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let field = |name: &str| {
            status.lines().find(|line| line.starts_with(name)).map(|line| line[name.len()..].trim().to_owned())
        };
        println!(
            "gateway memory: peak RSS (VmHWM) {}, now (VmRSS) {}",
            field("VmHWM:").unwrap_or_default(),
            field("VmRSS:").unwrap_or_default()
        );
    }
}

impl Drop for BenchGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `sends` until it holds at least `count` entries (for at most a minute).
pub async fn at_least<T>(count: usize, mut sends: impl FnMut() -> Vec<T>) -> Vec<T> {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let sent = sends();
            if sent.len() >= count {
                return sent;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    })
    .await
    .expect("answered")
}

/// The `p` quantile (0..=1) of `sorted` latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1))]
}

/// `p50 …, max …` of `latencies`, in milliseconds.
pub fn p50_max(latencies: &mut [Duration]) -> String {
    latencies.sort();
    let ms = |latency: Duration| latency.as_secs_f64() * 1e3;
    format!(
        "p50 {:.1} ms, max {:.1} ms",
        ms(percentile(latencies, 0.5)),
        ms(latencies.last().copied().unwrap_or_default())
    )
}

/// The queue settings a user gives their session for the back-to-back phase: each message
/// its own run, no quiet time, so the second answer waits only for the send budgets.
pub const EACH_MESSAGE_ITS_OWN_RUN: &str = "/queue followup debounce:0";

/// Pairs of back-to-back messages per queue setting in the back-to-back phase.
pub const PAIRS: usize = 10;

/// Between two pairs of the back-to-back phase: the bot-wide budget (Telegram spaces every
/// call 35 ms) is not what a pair waits for.
pub const PAIR_GAP: Duration = Duration::from_millis(100);

/// Long enough for every per-chat budget to be full again (Telegram's and Slack's refill in
/// 3 s, Discord's in 5.25 s): each pair starts from a quiet chat.
pub const REFILL: Duration = Duration::from_millis(5_500);

/// Runs `run` on a multi-threaded runtime when invoked by `cargo bench` (not by `cargo test`).
pub fn bench_main<F: Future<Output = ()>>(run: impl FnOnce() -> F) {
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(run());
}
