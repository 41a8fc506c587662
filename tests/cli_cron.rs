//! `ferry cron`, run as the real binary in a clean environment on a fresh state directory:
//! a job added, listed with its next run in its zone, paused, resumed, made due now, its
//! history read, removed; a schedule that cannot fire refused with the reason, and the
//! exit code says so.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use support::{error_line, stderr, stdout};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temp dir") }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path().join("home"))
            .env("FERRY_STATE_DIR", self.state_dir())
            .env("TZ", "UTC")
            .current_dir(self.dir.path())
            .output()
            .expect("run ferry")
    }

    /// Runs `ferry cron <args>`, which must succeed; its stdout.
    fn cron(&self, args: &[&str]) -> String {
        let output = self.run(&[&["cron"], args].concat());
        assert!(output.status.success(), "ferry cron {args:?}: {}", stderr(&output));
        stdout(&output)
    }
}

#[test]
fn a_job_is_added_listed_paused_resumed_run_and_removed() {
    let sandbox = Sandbox::new();
    assert_eq!(sandbox.cron(&["list"]).trim(), "no scheduled jobs");
    let added = sandbox.cron(&[
        "add",
        "--to",
        "telegram:42",
        "--cron",
        "0 8 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--text",
        "standup",
        "--name",
        "standup",
    ]);
    assert!(added.starts_with("added "), "{added}");
    assert!(added.contains("T08:00:00+01:00") || added.contains("T08:00:00+02:00"), "next run in Berlin: {added}");
    let id = added.split_whitespace().nth(1).expect("an id").to_owned();

    let listed = sandbox.cron(&["list"]);
    assert!(listed.contains(&id) && listed.contains("cron 0 8 * * 1-5 (Europe/Berlin)"), "{listed}");
    assert!(listed.contains("telegram:42") && listed.contains("by operator"), "{listed}");

    assert_eq!(sandbox.cron(&["pause", &id]).trim(), format!("paused {id}"));
    assert!(sandbox.cron(&["list"]).contains("(paused)"));
    assert!(sandbox.cron(&["resume", &id]).starts_with(&format!("resumed {id}: next run ")));
    assert!(sandbox.cron(&["run", &id]).contains("is due now"));
    assert_eq!(sandbox.cron(&["runs", &id]).trim(), "no runs yet", "the CLI never fires a job itself");
    assert_eq!(sandbox.cron(&["remove", &id]).trim(), format!("removed {id}"));
    assert_eq!(sandbox.cron(&["list"]).trim(), "no scheduled jobs");

    let missing = error_line(&sandbox.run(&["cron", "remove", &id]));
    assert!(missing.contains(&format!("there is no job `{id}`")), "{missing}");
}

#[test]
fn a_schedule_that_cannot_fire_is_refused_with_the_reason() {
    let sandbox = Sandbox::new();
    for (args, reason) in [
        (&["--every", "5s"][..], "more often than every 10s"),
        (&["--at", "2020-01-01T09:00:00Z"][..], "already passed"),
        (&["--cron", "0 0 31 2 *"][..], "can never fire"),
        (&["--cron", "0 9 * * *", "--tz", "Mars/Olympus"][..], "not an IANA time zone"),
        (&["--at", "2030-03-31T02:30", "--tz", "Europe/Berlin"][..], "does not exist in Europe/Berlin"),
        (&["--in", "soon"][..], "not a duration"),
    ] {
        let output = sandbox.run(&[&["cron", "add", "--to", "slack:D1", "--text", "x"][..], args].concat());
        let error = error_line(&output);
        assert!(error.contains(reason), "{args:?}: {error}");
    }
    assert_eq!(sandbox.cron(&["list"]).trim(), "no scheduled jobs", "nothing was added");
}
