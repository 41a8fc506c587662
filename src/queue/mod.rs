//! When a message runs (SPEC §5): per-session lanes, the global lane, the five queue
//! modes, the quiet window and the cap, with every accepted message journaled until
//! answered.
//!
//! - [`scheduler`]: the decisions — run now, queue, steer, interrupt — and the runs;
//! - [`journal`]: accepted messages persisted until their run finished;
//! - [`settings`]: which mode applies to a session;
//! - [`prompt`]: the follow-up prompt formats;
//! - [`lanes`]: the global concurrency limit.

pub mod journal;
pub mod lanes;
pub mod prompt;
pub mod scheduler;
pub mod settings;

pub use journal::{AnsweredLog, JournalError, QueueJournal, QueuedMessage};
pub use scheduler::{Admission, LaneStatus, RunExecutor, RunJob, RunReport, Scheduler, StopScope, Stopped, Submitted};
pub use settings::QueueSettings;
