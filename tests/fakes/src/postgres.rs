//! Real PostgreSQL for tests: a fresh database per test on a shared server, or a private
//! cluster a test may stop, restart and kill.
//!
//! Nothing here fakes PostgreSQL. `tests/postgres/setup` starts one throwaway cluster (per CI
//! run, or per developer shell) and exports where it is; `.ci/run` does this and tears it down:
//!
//! ```sh
//! eval "$(tests/postgres/setup)"   # FERRY_TEST_DATABASE_URL, FERRY_TEST_PG_BIN, FERRY_TEST_PG_DIR
//! cargo nextest run -p ferry-fakes --test postgres
//! tests/postgres/teardown "$FERRY_TEST_PG_DIR"
//! ```
//!
//! [`test_database`] creates a database with a random name on that server for one test and
//! drops it when the handle drops, so tests run in parallel (nextest runs each in a process of
//! its own) without seeing each other's tables, and without a cluster each. [`PrivateCluster`]
//! is for the few tests that take the server down (stop, restart, crash): they get a cluster of
//! their own, from the same binaries, so the shared one stays up for everybody else.
//!
//! Without the setup's environment both return `None` after printing a `skipped:` line, so
//! `cargo test` passes on a machine without PostgreSQL; `FERRY_REQUIRE_POSTGRES=1` (set by
//! `.ci/run`) makes that a panic instead, so CI cannot skip them by accident.
//!
//! ```no_run
//! # async fn example() {
//! let Some(db) = ferry_fakes::test_database().await else { return };
//! let client = db.connect().await;
//! client.batch_execute("CREATE TABLE notes (body text)").await.expect("create a table");
//! // Hand `db.url()` to the code under test.
//! # }
//! ```

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::{Client, NoTls};

/// The shared server's database (`postgres://ferry@127.0.0.1:PORT/ferry_test`), exported by
/// `tests/postgres/setup`.
const DATABASE_URL_VAR: &str = "FERRY_TEST_DATABASE_URL";
/// The PostgreSQL binaries' directory (`/usr/lib/postgresql/15/bin`), exported by the setup.
const PG_BIN_VAR: &str = "FERRY_TEST_PG_BIN";
/// `1` makes a missing PostgreSQL a test failure rather than a skip (`.ci/run` sets it).
const REQUIRE_VAR: &str = "FERRY_REQUIRE_POSTGRES";

/// How long dropping a [`TestDatabase`] waits for `DROP DATABASE` before leaving the database
/// to the cluster's teardown.
const DROP_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried by [`PrivateCluster::start`]: a port picked free can be taken before the server
/// binds it.
const START_ATTEMPTS: usize = 5;
/// `pg_ctl -t`: how long `pg_ctl` waits for a start or a stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";
/// How long [`PrivateCluster::kill`] waits for the killed processes to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// A database of one test's own on the shared server; dropped when this handle drops.
///
/// Dropping it blocks the dropping thread until `DROP DATABASE … WITH (FORCE)` is done
/// (milliseconds; at most 10 s): the drop runs on a thread of its own with its own small
/// runtime, so it works from inside a `#[tokio::test]` (current-thread runtime included) and
/// cuts whatever connections the test left open. Waiting matters: nextest ends the process
/// right after the test, which would kill a detached drop, and the databases would pile up on
/// the shared server. Errors are printed and otherwise ignored (the cluster's teardown removes
/// whatever is left).
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    /// The setup's database (`FERRY_TEST_DATABASE_URL`), from which this one is created and dropped.
    admin_url: String,
}

/// A fresh database on the server `tests/postgres/setup` started, or `None` (the test skips)
/// when `FERRY_TEST_DATABASE_URL` is not set. Panics when the variable is not set but
/// `FERRY_REQUIRE_POSTGRES` is `1`, and when the server cannot be reached or the database
/// created.
///
/// Its name is `ferry_t_` and 16 random hex digits, unique across the parallel test processes.
/// Plain TCP only (the setup's server is on loopback): a URL asking for TLS fails to connect.
pub async fn test_database() -> Option<TestDatabase> {
    let Some(admin_url) = non_empty_var(DATABASE_URL_VAR) else {
        return unavailable("no PostgreSQL", &format!("{DATABASE_URL_VAR} is not set"));
    };
    let admin = connect(&admin_url).await.unwrap_or_else(|error| {
        panic!("{DATABASE_URL_VAR}={admin_url}: cannot connect ({}); is the cluster from tests/postgres/setup still running?", chain(&error))
    });
    let name = format!("ferry_t_{}", unique_hex());
    // The name is ours and plain ASCII: nothing to quote.
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|error| panic!("creating the test database {name} on {admin_url}: {}", chain(&error)));
    let url = with_database(&admin_url, &name);
    Some(TestDatabase { name, url, admin_url })
}

impl TestDatabase {
    /// `postgres://…/ferry_t_…`: the server's URL with this database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A connection to this database (its driver task spawned on the current runtime). Panics
    /// if the server cannot be reached.
    pub async fn connect(&self) -> Client {
        connect(&self.url)
            .await
            .unwrap_or_else(|error| panic!("connecting to the test database {}: {}", self.name, chain(&error)))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Kept for a post-mortem (the chaos tests' `FERRY_CHAOS_KEEP`): the cluster's
        // teardown removes it with everything else.
        if std::env::var_os("FERRY_CHAOS_KEEP").is_some() {
            eprintln!("test database kept for inspection: {}", self.url);
            return;
        }
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("ferry-drop-test-db".to_owned()).spawn(move || {
            let _ = done.send(drop_database(&admin_url, &name));
        });
        let outcome = match spawned {
            Ok(_) => finished.recv_timeout(DROP_TIMEOUT).unwrap_or_else(|_| Err("timed out".to_owned())),
            Err(error) => Err(format!("no thread to drop it from: {error}")),
        };
        if let Err(error) = outcome {
            eprintln!(
                "note: the test database {} was not dropped ({error}); the cluster's teardown removes it",
                self.name
            );
        }
    }
}

/// `DROP DATABASE … WITH (FORCE)` on a runtime of this thread's own.
fn drop_database(admin_url: &str, name: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("no runtime: {error}"))?;
    runtime.block_on(async {
        let admin = connect(admin_url).await.map_err(|error| format!("connecting: {}", chain(&error)))?;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .map_err(|error| chain(&error))
    })
}

/// A PostgreSQL cluster of one test's own, for tests that stop, restart or crash the server
/// (the shared one must stay up for the tests running beside them).
///
/// [`start`](Self::start) runs `initdb` in a new temporary directory and starts the server on a
/// free loopback port with a database `ferry` (superuser `ferry`, no password). The port and
/// the data stay the same across [`stop`](Self::stop), [`start_again`](Self::start_again),
/// [`restart`](Self::restart) and [`kill`](Self::kill), so a client given [`url`](Self::url)
/// once can reconnect. Settings are the setup's: `fsync=off` (only process crashes are
/// simulated, and the WAL written at commit survives those), `synchronous_commit` on.
///
/// The operations are `async` and run the blocking `pg_ctl` calls with `spawn_blocking`, so the
/// code under test keeps running on the test's runtime meanwhile (a replica retrying while the
/// server restarts). They panic with the server's log when PostgreSQL does not do as told.
/// Dropping the handle stops the server (immediate shutdown, blocking briefly) and removes the
/// directory; a test process killed outright (a nextest timeout) leaves both behind.
///
/// As root (CI), `initdb` and `postgres` refuse to run, so they run as the `postgres` user
/// (`runuser -u postgres`) in a directory it owns.
#[derive(Debug)]
pub struct PrivateCluster {
    control: Arc<Control>,
}

impl PrivateCluster {
    /// A new running cluster, or `None` (the test skips) when no PostgreSQL binaries are found:
    /// `FERRY_TEST_PG_BIN` first, else the newest `/usr/lib/postgresql/*/bin`. Panics instead
    /// when `FERRY_REQUIRE_POSTGRES` is `1`, when `FERRY_TEST_PG_BIN` names a directory without
    /// `initdb`, and when the cluster cannot be created or started.
    pub async fn start() -> Option<Self> {
        let Some(bin) = find_bin() else {
            return unavailable(
                "no PostgreSQL binaries",
                &format!("{PG_BIN_VAR} is not set and there is no /usr/lib/postgresql/*/bin/initdb"),
            );
        };
        let control = tokio::task::spawn_blocking(move || Control::create(bin))
            .await
            .unwrap_or_else(|error| panic!("PrivateCluster::start: the blocking task failed: {error}"))
            .unwrap_or_else(|error| panic!("PrivateCluster::start: {error}"));
        Some(Self { control: Arc::new(control) })
    }

    /// `postgres://ferry@127.0.0.1:PORT/ferry`.
    pub fn url(&self) -> &str {
        &self.control.url
    }

    /// The loopback port, the same for the cluster's whole life.
    pub fn port(&self) -> u16 {
        self.control.port
    }

    /// The cluster's data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.control.data
    }

    /// A connection to database `ferry`. Panics if the server does not answer.
    pub async fn connect(&self) -> Client {
        self.try_connect().await.unwrap_or_else(|error| panic!("connecting to the private cluster: {}", chain(&error)))
    }

    /// A connection to database `ferry`, or the error (the server is stopped or killed).
    pub async fn try_connect(&self) -> Result<Client, tokio_postgres::Error> {
        connect(&self.control.url).await
    }

    /// Fast shutdown (`pg_ctl -m fast stop`): sessions are cut, the server checkpoints and
    /// exits; returns once it has.
    pub async fn stop(&self) {
        self.blocking("stop", Control::stop).await;
    }

    /// Starts the stopped or killed server again on the same port and data; returns once it
    /// accepts connections (after crash recovery, following a [`kill`](Self::kill)).
    pub async fn start_again(&self) {
        self.blocking("start_again", Control::start).await;
    }

    /// [`stop`](Self::stop), then [`start_again`](Self::start_again).
    pub async fn restart(&self) {
        self.blocking("restart", |control| control.stop().and_then(|()| control.start())).await;
    }

    /// A crash: SIGKILL to the postmaster (its pid read from `postmaster.pid`), then to its
    /// children (every process left in the data directory), like the whole server dying at
    /// once. Open connections break and new ones are
    /// refused; what was committed survives (the WAL reached the kernel at commit) and is
    /// there after [`start_again`](Self::start_again), which runs crash recovery. Returns once
    /// the processes are gone.
    pub async fn kill(&self) {
        self.blocking("kill", Control::kill).await;
    }

    /// Runs `run` on the blocking pool, one operation at a time (a test that aborts a restart
    /// midway and drops the handle waits for it rather than racing it).
    async fn blocking(&self, operation: &str, run: impl FnOnce(&Control) -> Result<(), String> + Send + 'static) {
        let control = Arc::clone(&self.control);
        let outcome = tokio::task::spawn_blocking(move || {
            let _one_at_a_time = control.lock();
            run(&control)
        });
        match outcome.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("PrivateCluster::{operation}: {error}"),
            Err(error) => panic!("PrivateCluster::{operation}: the blocking task failed: {error}"),
        }
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let control = &self.control;
        let _one_at_a_time = control.lock();
        if control.running() {
            let stopped = control.pg_ctl(&["-m", "immediate", "stop"]);
            if let Err(error) = stopped {
                eprintln!("note: PrivateCluster: stopping the server in {}: {error}", control.dir.display());
            }
        }
        if std::env::var_os("FERRY_CHAOS_KEEP").is_some() {
            eprintln!("PrivateCluster kept for inspection (stopped): {}", control.dir.display());
            return;
        }
        if let Err(error) = std::fs::remove_dir_all(&control.dir) {
            eprintln!("note: PrivateCluster: removing {}: {error}", control.dir.display());
        }
    }
}

/// A private cluster's places and the blocking operations on it.
#[derive(Debug)]
struct Control {
    /// The PostgreSQL binaries.
    bin: PathBuf,
    /// The temporary directory holding everything: data, log, unix socket.
    dir: PathBuf,
    /// `dir/data`, the cluster's `PGDATA`.
    data: PathBuf,
    /// `dir/log`, the server's output.
    log: PathBuf,
    /// Run the binaries as `postgres` (we are root, which they refuse).
    as_postgres: bool,
    port: u16,
    url: String,
    /// Held through each operation: `pg_ctl` calls on one cluster must not overlap.
    operation: Mutex<()>,
}

impl Control {
    /// `initdb`, settings, a start on a free port (retried on another port if it fails), and
    /// database `ferry`. Removes the directory again on failure.
    fn create(bin: PathBuf) -> Result<Self, String> {
        let as_postgres = running_as_root()?;
        if as_postgres && !succeeds(Command::new("id").arg("postgres")) {
            return Err("running as root, which initdb refuses, and there is no `postgres` user to run it as \
                        (Debian's postgresql package creates one)"
                .to_owned());
        }
        let dir = std::env::temp_dir().join(format!("ferry-pg-{}", unique_hex()));
        std::fs::create_dir(&dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
        let mut control = Self {
            bin,
            data: dir.join("data"),
            log: dir.join("log"),
            dir,
            as_postgres,
            port: 0,
            url: String::new(),
            operation: Mutex::new(()),
        };
        let created = control.init_and_start();
        if created.is_err() {
            if control.running() {
                let _ = control.pg_ctl(&["-m", "immediate", "stop"]);
            }
            let _ = std::fs::remove_dir_all(&control.dir);
        }
        created.map(|()| control)
    }

    fn init_and_start(&mut self) -> Result<(), String> {
        if self.as_postgres {
            let dir = self.dir.display().to_string();
            run("chown", Command::new("chown").args(["postgres:", &dir]))?;
        }
        let data = self.data.display().to_string();
        // --no-sync: nothing here must outlive the machine. The C locale exists everywhere.
        let initdb_args =
            ["-D", &data, "-A", "trust", "-U", "ferry", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"];
        run("initdb", self.command("initdb").args(initdb_args))?;
        let conf = self.data.join("postgresql.conf");
        let mut settings =
            std::fs::read_to_string(&conf).map_err(|error| format!("reading {}: {error}", conf.display()))?;
        settings.push_str("\ninclude 'ferry.conf'\n");
        self.write_file(&conf, &settings)?;

        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            self.port = free_port()?;
            self.write_settings()?;
            match self.start() {
                Ok(()) => {
                    self.url = format!("postgres://ferry@127.0.0.1:{}/ferry", self.port);
                    let port = self.port.to_string();
                    let createdb = self.bin.join("createdb");
                    return run(
                        "createdb",
                        Command::new(createdb).args(["-h", "127.0.0.1", "-p", &port, "-U", "ferry", "ferry"]),
                    );
                }
                Err(error) => failures.push(format!("port {}: {error}", self.port)),
            }
        }
        Err(format!("the server did not start in {START_ATTEMPTS} attempts:\n{}", failures.join("\n")))
    }

    /// `ferry.conf`, included by `postgresql.conf`: rewritten whole when a start is retried on
    /// another port.
    fn write_settings(&self) -> Result<(), String> {
        // fsync and full_page_writes off: process crashes are simulated, operating system
        // crashes are not, and the WAL handed to the kernel at commit survives the former.
        // synchronous_commit stays on: an acknowledged commit is in the WAL before a kill.
        // Small shared_buffers: several of these may run at once beside the shared server.
        let settings = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             fsync = off\nfull_page_writes = off\nshared_buffers = 32MB\n",
            self.port,
            self.dir.display(),
        );
        self.write_file(&self.data.join("ferry.conf"), &settings)
    }

    /// Writes a file the server reads: owned by `postgres` when we are root, so that a strict
    /// umask cannot hide it from the server.
    fn write_file(&self, path: &Path, contents: &str) -> Result<(), String> {
        std::fs::write(path, contents).map_err(|error| format!("writing {}: {error}", path.display()))?;
        if self.as_postgres {
            run("chown", Command::new("chown").arg("postgres:").arg(path))?;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // A panic in an earlier operation leaves nothing half-done that a lock would protect.
        self.operation.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn start(&self) -> Result<(), String> {
        let log = self.log.display().to_string();
        self.pg_ctl(&["-l", &log, "start"])
    }

    fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "fast", "stop"])
    }

    fn kill(&self) -> Result<(), String> {
        let pid_file = self.data.join("postmaster.pid");
        let contents = std::fs::read_to_string(&pid_file)
            .map_err(|error| format!("reading {}: {error} (is the server running?)", pid_file.display()))?;
        let postmaster: u32 = contents
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("{} does not start with a pid", pid_file.display()))?;
        if !alive(postmaster) {
            return Err(format!("the postmaster ({postmaster}) is not running"));
        }
        // The postmaster first, so that it cannot notice its children dying and recover; then
        // whatever still runs in the data directory (every server process works there), which
        // also catches a child forked just before the postmaster died.
        self.signal_kill(postmaster)?;
        let data = self.data.canonicalize().map_err(|error| format!("resolving {}: {error}", self.data.display()))?;
        let deadline = Instant::now() + KILL_WAIT;
        loop {
            let left = processes_in(&data);
            if left.is_empty() && !alive(postmaster) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("processes {left:?} were still running {KILL_WAIT:?} after SIGKILL"));
            }
            for pid in left {
                // It may have exited meanwhile.
                let _ = self.signal_kill(pid);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.clear_after_crash(&contents);
        Ok(())
    }

    /// What a killed server leaves behind, removed once all its processes are dead, so that
    /// neither a start nor the drop trips over it:
    /// - its lock files. The postmaster may stay a zombie (it is not our child, and PID 1 in a
    ///   container may never reap orphans), and a zombie still answers kill(pid, 0), so
    ///   PostgreSQL would take the files for a live server's and refuse to start;
    /// - its small System V shared memory segment (line 7 of `postmaster.pid`: key, id), which
    ///   a start cleans up only when it finds the lock file, and nothing cleans up after a drop:
    ///   one would be left per kill. Best effort (`ipcrm` is util-linux's).
    fn clear_after_crash(&self, pid_file_contents: &str) {
        let segment = pid_file_contents.lines().nth(6).and_then(|line| line.split_whitespace().nth(1));
        if let Some(id) = segment {
            let _ = succeeds(Command::new("ipcrm").args(["-m", id]));
        }
        let socket_lock = self.dir.join(format!(".s.PGSQL.{}.lock", self.port));
        for stale in [self.data.join("postmaster.pid"), socket_lock] {
            let _ = std::fs::remove_file(stale);
        }
    }

    /// SIGKILL through `pg_ctl kill` (no libc here; it runs as the server's user).
    fn signal_kill(&self, pid: u32) -> Result<(), String> {
        run("pg_ctl kill", self.command("pg_ctl").args(["kill", "KILL", &pid.to_string()]))
    }

    fn running(&self) -> bool {
        let data = self.data.display().to_string();
        succeeds(self.command("pg_ctl").args(["-D", &data, "status"]))
    }

    /// `pg_ctl -D data -w -t 60 <args>`; on failure, the error carries the server's log.
    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.data.display().to_string();
        let mut command = self.command("pg_ctl");
        command.args(["-D", &data, "-w", "-t", PG_CTL_WAIT_SECS]).args(args);
        run("pg_ctl", &mut command).map_err(|error| format!("{error}\nserver log (the end):\n{}", self.log_tail()))
    }

    /// A PostgreSQL binary, as `postgres` when we are root, run from the cluster's directory
    /// (a working directory the server's user cannot read makes initdb complain).
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(&self.dir);
        command
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Runs `command` to completion; an error names `what` and carries its output.
fn run(what: &str, command: &mut Command) -> Result<(), String> {
    let output =
        command.stdin(Stdio::null()).output().map_err(|error| format!("{what}: cannot run {command:?}: {error}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {command:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn running_as_root() -> Result<bool, String> {
    let output = Command::new("id").arg("-u").output().map_err(|error| format!("running id -u: {error}"))?;
    Ok(String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// [`PG_BIN_VAR`], else the newest `/usr/lib/postgresql/N/bin` with an `initdb`.
fn find_bin() -> Option<PathBuf> {
    if let Some(bin) = non_empty_var(PG_BIN_VAR) {
        let bin = PathBuf::from(bin);
        assert!(bin.join("initdb").is_file(), "{PG_BIN_VAR}={} has no initdb", bin.display());
        return Some(bin);
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
}

/// A loopback port nothing listens on right now (the OS picks one for port 0).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|error| format!("finding a free port: {error}"))
}

/// Whether `pid` exists and has not exited (a zombie has).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat_fields(&stat).first() != Some(&"Z"))
}

/// The live processes whose working directory is `dir`, from `/proc`. Another user's are
/// unreadable unless we are root; the server runs as us, or as `postgres` when we are root.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir) && alive(*pid))
        .collect()
}

/// `/proc/PID/stat`'s fields after the command name (which may hold spaces and parentheses):
/// state, ppid, …
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default()
}

/// Skips (`None`, with a notice), or panics when [`REQUIRE_VAR`] is `1`.
fn unavailable<T>(missing: &str, why: &str) -> Option<T> {
    assert!(
        std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
        "{REQUIRE_VAR}=1 but {why}: eval \"$(tests/postgres/setup)\" first"
    );
    eprintln!("skipped: {missing} (eval \"$(tests/postgres/setup)\")");
    None
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// 16 hex digits unique across processes and calls: std's randomly keyed hasher over the pid,
/// the time and a counter.
fn unique_hex() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    std::process::id().hash(&mut hasher);
    SystemTime::now().duration_since(UNIX_EPOCH).map(|since| since.as_nanos()).unwrap_or_default().hash(&mut hasher);
    CALLS.fetch_add(1, Ordering::Relaxed).hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// `url` with its path (the database) replaced by `database`; the query string is kept.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |scheme_end| scheme_end + 3);
    let path = base[authority..].find('/').map_or(base.len(), |slash| authority + slash);
    let mut url = format!("{}/{database}", &base[..path]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// An error with its sources: tokio-postgres's `Display` says only "db error" or "error
/// connecting to server", and the server's message or the refused connection is the source.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Connects without TLS and spawns the connection's driver on the current runtime; the driver
/// ends with the client, or with an error when the server goes away.
async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        let name = "ferry_t_0";
        assert_eq!(
            with_database("postgres://ferry@127.0.0.1:5/ferry_test", name),
            "postgres://ferry@127.0.0.1:5/ferry_t_0"
        );
        assert_eq!(with_database("postgres://ferry@127.0.0.1:5", name), "postgres://ferry@127.0.0.1:5/ferry_t_0");
        assert_eq!(
            with_database("postgresql://u:p@h/db?sslmode=disable&connect_timeout=5", name),
            "postgresql://u:p@h/ferry_t_0?sslmode=disable&connect_timeout=5"
        );
        assert_eq!(
            with_database("postgres://h?application_name=a/b", name),
            "postgres://h/ferry_t_0?application_name=a/b"
        );
    }

    #[test]
    fn unique_hex_is_sixteen_hex_digits_and_differs_between_calls() {
        let (first, second) = (unique_hex(), unique_hex());
        assert_ne!(first, second);
        for hex in [first, second] {
            assert!(hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()), "{hex}");
        }
    }

    #[test]
    fn stat_fields_skip_a_command_name_with_spaces_and_parentheses() {
        let stat = "42 (postgres: ferry (x) idle) S 7 42 42 0 -1";
        assert_eq!(&stat_fields(stat)[..2], ["S", "7"]);
    }
}
