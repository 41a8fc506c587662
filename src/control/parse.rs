//! Recognizing a command in a message's text.

use std::time::Duration;

use crate::config::{DropPolicy, QueueMode};
use crate::models::{ReasoningDisplay, ThinkingLevel};

/// A command a user sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlCommand {
    /// `/new`: start a fresh session.
    New,
    /// `/reset`: the same, by its other name.
    Reset,
    /// `/stop` or a stop word: abort the running reply and clear the queue.
    Stop,
    /// `/queue …`
    Queue(QueueCommand),
    /// `/status`
    Status,
    /// `/verbose [on|off]`
    Verbose(VerboseCommand),
    /// `/compact [instructions]`: summarize the older conversation now; the words after
    /// the command guide the summary.
    Compact(Option<String>),
    /// `/model [provider/model | alias | number | default]`
    Model(ModelCommand),
    /// `/think [off|minimal|low|medium|high|default]`
    Think(SettingCommand<ThinkingLevel>),
    /// `/reasoning [off|on|stream]`
    Reasoning(SettingCommand<ReasoningDisplay>),
    /// `/approve ID`: run the command waiting for approval under that id.
    Approve(String),
    /// `/deny ID`: refuse it.
    Deny(String),
    /// `/remind in 20m stretch`, `/remind at 09:00 standup`
    Remind(RemindCommand),
    /// `/jobs`, `/jobs pause|resume|run|rm <id>`
    Jobs(JobsCommand),
    /// `/remember TEXT`: keep it in long-term memory (`MEMORY.md` of the user's scope).
    Remember(String),
    /// `/memory`: what the user's memory scope holds.
    Memory,
    /// `/forget TEXT`: remove the lines of memory that contain it.
    Forget(String),
}

/// What `/remind` asks for: a reminder, sent as it is, once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemindCommand {
    /// `/remind in <duration> <text>`
    In { after: String, text: String },
    /// `/remind at <HH:MM> <text>`: today, or tomorrow if that time has passed.
    At { clock: String, text: String },
    /// Anything else: the reply explains the syntax.
    Invalid(String),
}

/// What `/jobs` asks for: this chat's scheduled jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobsCommand {
    List,
    Pause(String),
    Resume(String),
    Run(String),
    Remove(String),
    Invalid(String),
}

/// What `/model` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelCommand {
    /// `/model` alone: list the choices and the current model.
    Show,
    /// `/model default`: back to the configured models (with their fallbacks).
    Reset,
    /// `/model <choice>`: checked against the allowed models by the dispatcher.
    Set(String),
}

/// A per-session setting command: show it, set it, go back to the default, or a mistake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingCommand<T> {
    Show,
    Set(T),
    Reset,
    Invalid(String),
}

/// What `/verbose` asks for: whether replies list the tools the agent used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerboseCommand {
    /// `/verbose` alone: say whether it is on.
    Show,
    /// `/verbose on` / `/verbose off`.
    Set(bool),
    /// Anything else: the reply explains the syntax.
    Invalid(String),
}

/// What `/queue` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCommand {
    /// `/queue` alone: show the session's queue settings.
    Show,
    /// `/queue reset`: back to the configured behaviour.
    Reset,
    /// `/queue <mode> [debounce:2s] [cap:N] [drop:old|new|summarize]`
    Set { mode: QueueMode, debounce: Option<Duration>, cap: Option<usize>, drop: Option<DropPolicy> },
    /// Anything else: the reply explains the syntax.
    Invalid(String),
}

/// Whole messages that mean "stop", in the languages users most often write them in.
const STOP_WORDS: [&str; 14] = [
    "stop",
    "abort",
    "cancel",
    "halt",
    "стоп",
    "хватит",
    "отмена",
    "停止",
    "停",
    "やめて",
    "stopp",
    "arrête",
    "detente",
    "basta",
];

/// The command in `text`, if it is one. Leading mentions (`@bot /new`, `<@U123> /stop`)
/// are skipped, and a Telegram-style `/new@botname` counts.
pub fn parse_command(text: &str) -> Option<ControlCommand> {
    let words: Vec<&str> = text.split_whitespace().skip_while(|word| is_mention(word)).collect();
    let first = *words.first()?;
    if words.len() == 1 {
        let bare = first.trim_end_matches(['.', '!', '?', '。', '！']).to_lowercase();
        if STOP_WORDS.contains(&bare.as_str()) {
            return Some(ControlCommand::Stop);
        }
    }
    let name = first.strip_prefix('/')?.split('@').next()?.to_lowercase();
    let args = &words[1..];
    match name.as_str() {
        "new" => Some(ControlCommand::New),
        "reset" => Some(ControlCommand::Reset),
        "stop" | "abort" => Some(ControlCommand::Stop),
        "status" => Some(ControlCommand::Status),
        "queue" => Some(ControlCommand::Queue(parse_queue(args))),
        "verbose" => Some(ControlCommand::Verbose(parse_verbose(args))),
        "compact" => Some(ControlCommand::Compact((!args.is_empty()).then(|| args.join(" ")))),
        "model" | "models" => Some(ControlCommand::Model(match args {
            [] => ModelCommand::Show,
            [word] if word.eq_ignore_ascii_case("default") || word.eq_ignore_ascii_case("reset") => ModelCommand::Reset,
            _ => ModelCommand::Set(args.join(" ")),
        })),
        "think" | "thinking" => Some(ControlCommand::Think(parse_setting(args, "/think takes one level"))),
        "reasoning" => Some(ControlCommand::Reasoning(parse_setting(args, "/reasoning takes one word"))),
        "approve" => Some(ControlCommand::Approve(args.join(" "))),
        "deny" => Some(ControlCommand::Deny(args.join(" "))),
        "remind" => Some(ControlCommand::Remind(parse_remind(args))),
        "jobs" => Some(ControlCommand::Jobs(parse_jobs(args))),
        "remember" => Some(ControlCommand::Remember(args.join(" "))),
        "memory" => Some(ControlCommand::Memory),
        "forget" => Some(ControlCommand::Forget(args.join(" "))),
        _ => None,
    }
}

fn parse_remind(args: &[&str]) -> RemindCommand {
    let text = || args.get(2..).map(|words| words.join(" ")).unwrap_or_default();
    match args {
        [how, when, _, ..] if how.eq_ignore_ascii_case("in") => {
            RemindCommand::In { after: (*when).to_owned(), text: text() }
        }
        [how, when, _, ..] if how.eq_ignore_ascii_case("at") => {
            RemindCommand::At { clock: (*when).to_owned(), text: text() }
        }
        _ => RemindCommand::Invalid("/remind needs a time and what to remind you of".to_owned()),
    }
}

fn parse_jobs(args: &[&str]) -> JobsCommand {
    match args {
        [] => JobsCommand::List,
        [verb, id] => match verb.to_lowercase().as_str() {
            "pause" => JobsCommand::Pause((*id).to_owned()),
            "resume" => JobsCommand::Resume((*id).to_owned()),
            "run" => JobsCommand::Run((*id).to_owned()),
            "rm" | "remove" | "delete" => JobsCommand::Remove((*id).to_owned()),
            other => JobsCommand::Invalid(format!("`{other}` is not something /jobs does")),
        },
        _ => JobsCommand::Invalid("/jobs takes a verb and a job id".to_owned()),
    }
}

fn parse_setting<T: std::str::FromStr>(args: &[&str], too_many: &str) -> SettingCommand<T>
where
    T::Err: std::fmt::Display,
{
    match args {
        [] => SettingCommand::Show,
        [word] if word.eq_ignore_ascii_case("default") || word.eq_ignore_ascii_case("reset") => SettingCommand::Reset,
        [word] => match word.parse() {
            Ok(value) => SettingCommand::Set(value),
            Err(error) => SettingCommand::Invalid(error.to_string()),
        },
        _ => SettingCommand::Invalid(too_many.to_owned()),
    }
}

fn is_mention(word: &str) -> bool {
    (word.starts_with('@') && word.len() > 1) || (word.starts_with("<@") && word.ends_with('>'))
}

fn parse_verbose(args: &[&str]) -> VerboseCommand {
    match args {
        [] => VerboseCommand::Show,
        [word] => match word.to_lowercase().as_str() {
            "on" | "true" | "yes" | "1" => VerboseCommand::Set(true),
            "off" | "false" | "no" | "0" => VerboseCommand::Set(false),
            other => VerboseCommand::Invalid(format!("`{other}` is neither on nor off")),
        },
        _ => VerboseCommand::Invalid("/verbose takes one word".to_owned()),
    }
}

fn parse_queue(args: &[&str]) -> QueueCommand {
    let Some((first, options)) = args.split_first() else { return QueueCommand::Show };
    if first.eq_ignore_ascii_case("reset") && options.is_empty() {
        return QueueCommand::Reset;
    }
    let mode = match first.to_lowercase().as_str() {
        "collect" => QueueMode::Collect,
        "steer" => QueueMode::Steer,
        "followup" => QueueMode::Followup,
        "steer-backlog" => QueueMode::SteerBacklog,
        "interrupt" => QueueMode::Interrupt,
        other => return QueueCommand::Invalid(format!("unknown queue mode `{other}`")),
    };
    let (mut debounce, mut cap, mut drop) = (None, None, None);
    for option in options {
        let Some((key, value)) = option.split_once(':') else {
            return QueueCommand::Invalid(format!("`{option}` is not an option like debounce:2s, cap:10 or drop:old"));
        };
        match key.to_lowercase().as_str() {
            "debounce" => match parse_duration(value) {
                Some(parsed) => debounce = Some(parsed),
                None => return QueueCommand::Invalid(format!("`{value}` is not a duration like 2s or 500ms")),
            },
            "cap" => match value.parse::<usize>() {
                Ok(parsed) if parsed > 0 => cap = Some(parsed),
                _ => return QueueCommand::Invalid(format!("cap must be a whole number above 0, not `{value}`")),
            },
            "drop" => match value.to_lowercase().as_str() {
                "old" => drop = Some(DropPolicy::Old),
                "new" => drop = Some(DropPolicy::New),
                "summarize" => drop = Some(DropPolicy::Summarize),
                _ => return QueueCommand::Invalid(format!("drop must be old, new or summarize, not `{value}`")),
            },
            other => return QueueCommand::Invalid(format!("unknown option `{other}`")),
        }
    }
    QueueCommand::Set { mode, debounce, cap, drop }
}

/// `2s`, `1.5s`, `500ms`, or a bare number of milliseconds.
fn parse_duration(value: &str) -> Option<Duration> {
    let value = value.trim().to_lowercase();
    if let Some(ms) = value.strip_suffix("ms") {
        return ms.parse::<u64>().ok().map(Duration::from_millis);
    }
    if let Some(seconds) = value.strip_suffix('s') {
        return seconds.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64);
    }
    value.parse::<u64>().ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_commands_are_recognized_with_or_without_a_mention() {
        assert_eq!(parse_command("/new"), Some(ControlCommand::New));
        assert_eq!(parse_command("  /reset  "), Some(ControlCommand::Reset));
        assert_eq!(parse_command("@ferrybot /new"), Some(ControlCommand::New));
        assert_eq!(parse_command("<@U0BOT> /status"), Some(ControlCommand::Status));
        assert_eq!(parse_command("/stop@ferrybot"), Some(ControlCommand::Stop));
        assert_eq!(parse_command("/unknown"), None);
        assert_eq!(parse_command("please /new"), None, "a command must come first");
    }

    #[test]
    fn stop_words_count_only_as_the_whole_message() {
        for word in ["stop", "Stop!", "ABORT", "стоп", "停止", "@bot stop"] {
            assert_eq!(parse_command(word), Some(ControlCommand::Stop), "{word}");
        }
        assert_eq!(parse_command("stop the music"), None);
        assert_eq!(parse_command("don't stop"), None);
    }

    #[test]
    fn queue_options_parse_and_bad_ones_explain_themselves() {
        assert_eq!(parse_command("/queue"), Some(ControlCommand::Queue(QueueCommand::Show)));
        assert_eq!(parse_command("/queue reset"), Some(ControlCommand::Queue(QueueCommand::Reset)));
        assert_eq!(
            parse_command("/queue followup debounce:2s cap:5 drop:old"),
            Some(ControlCommand::Queue(QueueCommand::Set {
                mode: QueueMode::Followup,
                debounce: Some(Duration::from_secs(2)),
                cap: Some(5),
                drop: Some(DropPolicy::Old),
            }))
        );
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["/queue sideways", "/queue collect cap:0", "/queue steer drop:all", "/queue steer debounce:soon"] {
            assert!(matches!(parse_command(bad), Some(ControlCommand::Queue(QueueCommand::Invalid(_)))), "{bad}");
        }
    }

    #[test]
    fn compact_takes_optional_instructions() {
        assert_eq!(parse_command("/compact"), Some(ControlCommand::Compact(None)));
        assert_eq!(
            parse_command("@bot /compact keep  the dates"),
            Some(ControlCommand::Compact(Some("keep the dates".into())))
        );
    }

    #[test]
    fn model_think_and_reasoning_parse_their_arguments() {
        assert_eq!(parse_command("/model"), Some(ControlCommand::Model(ModelCommand::Show)));
        assert_eq!(parse_command("/model Default"), Some(ControlCommand::Model(ModelCommand::Reset)));
        assert_eq!(
            parse_command("@bot /model openai/gpt-4o"),
            Some(ControlCommand::Model(ModelCommand::Set("openai/gpt-4o".into())))
        );
        assert_eq!(parse_command("/think high"), Some(ControlCommand::Think(SettingCommand::Set(ThinkingLevel::High))));
        assert_eq!(parse_command("/think"), Some(ControlCommand::Think(SettingCommand::Show)));
        assert_eq!(parse_command("/think default"), Some(ControlCommand::Think(SettingCommand::Reset)));
        assert!(matches!(parse_command("/think hard"), Some(ControlCommand::Think(SettingCommand::Invalid(_)))));
        assert_eq!(
            parse_command("/reasoning stream"),
            Some(ControlCommand::Reasoning(SettingCommand::Set(ReasoningDisplay::Stream)))
        );
        assert!(matches!(
            parse_command("/reasoning on off"),
            Some(ControlCommand::Reasoning(SettingCommand::Invalid(_)))
        ));
    }

    #[test]
    fn verbose_turns_on_and_off() {
        assert_eq!(parse_command("/verbose"), Some(ControlCommand::Verbose(VerboseCommand::Show)));
        assert_eq!(parse_command("/verbose ON"), Some(ControlCommand::Verbose(VerboseCommand::Set(true))));
        assert_eq!(parse_command("@bot /verbose off"), Some(ControlCommand::Verbose(VerboseCommand::Set(false))));
        for bad in ["/verbose loud", "/verbose on please"] {
            assert!(matches!(parse_command(bad), Some(ControlCommand::Verbose(VerboseCommand::Invalid(_)))), "{bad}");
        }
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    #[test]
    fn remind_takes_in_or_at_a_time_and_the_rest_as_its_text() {
        assert_eq!(
            parse_command("/remind in 20m stretch your legs"),
            Some(ControlCommand::Remind(RemindCommand::In { after: "20m".into(), text: "stretch your legs".into() }))
        );
        assert_eq!(
            parse_command("/remind AT 09:00 standup"),
            Some(ControlCommand::Remind(RemindCommand::At { clock: "09:00".into(), text: "standup".into() }))
        );
        assert!(matches!(parse_command("/remind in 20m"), Some(ControlCommand::Remind(RemindCommand::Invalid(_)))));
        assert!(matches!(parse_command("/remind"), Some(ControlCommand::Remind(RemindCommand::Invalid(_)))));
    }

    #[test]
    fn jobs_lists_or_changes_one_job() {
        assert_eq!(parse_command("/jobs"), Some(ControlCommand::Jobs(JobsCommand::List)));
        assert_eq!(parse_command("/jobs rm abc"), Some(ControlCommand::Jobs(JobsCommand::Remove("abc".into()))));
        assert_eq!(parse_command("/jobs pause abc"), Some(ControlCommand::Jobs(JobsCommand::Pause("abc".into()))));
        assert!(matches!(parse_command("/jobs frobnicate abc"), Some(ControlCommand::Jobs(JobsCommand::Invalid(_)))));
    }
}
