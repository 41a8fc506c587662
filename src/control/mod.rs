//! Chat commands handled before the queue (SPEC §3.6): `/new`, `/reset`, `/stop` (and
//! plain stop words), `/queue …`, `/status`, `/verbose`, `/model`, `/think`, `/reasoning`. They act at once — `/stop` in particular is
//! never queued behind the run it is meant to stop.

mod parse;

pub use parse::{
    ControlCommand, JobsCommand, ModelCommand, QueueCommand, RemindCommand, SettingCommand, VerboseCommand,
    parse_command,
};
