//! Scheduled work: reminders, recurring jobs and the heartbeat, each fired exactly once, on
//! time, in its user's time zone, through restarts and across replicas.
//!
//! A job lives in the jobs store ([`crate::state::jobs`]). The [`ticker`] sleeps until the
//! next job is due (or a change wakes it), then claims the due fires; the store journals
//! each as an inbound message keyed by `(job id, fire slot)` in the same step. From there a
//! fire is an ordinary message: the journal, the session lanes (and leases, across
//! replicas), the delivery ledger and the outbound scheduler carry it, so each slot fires
//! once and its reply is delivered once. The run reports back ([`outcome`]): the job is due
//! again, retried with backoff after a failure, or paused after ten.
//!
//! - [`fire`]: what a due job becomes (missed slots collapsed or skipped; the message);
//! - [`plan`]: missed-run and retry policy;
//! - [`manage`]: making and changing jobs for the tool, the chat commands and the CLI;
//! - [`heartbeat`]: the per-agent system job that reads `HEARTBEAT.md`;
//! - [`stored`]: a schedule as the store keeps it.
//!
//! What a schedule is (`at`, `in`, `every`, `cron` with an IANA zone) is
//! [`crate::types::schedule`]'s, shared with the config's checks.

pub mod fire;
pub mod heartbeat;
pub mod manage;
pub mod outcome;
pub mod plan;
pub mod stored;
pub mod ticker;

pub use manage::{CronError, CronJobs, NewJob};
