//! `[cron]`, `user_timezone` and `[agents.defaults.heartbeat]`: an error names the key and
//! what is valid; a listed agent inherits the heartbeat, key by key.

use super::{Scratch, error_text};

#[test]
fn a_zone_that_is_not_iana_names_the_key() {
    let text = error_text(&Scratch::new(), "[agents.defaults]\nuser_timezone = \"CEST\"\n");
    assert!(text.contains("agents.defaults.user_timezone"), "{text}");
    assert!(text.contains("not an IANA time zone (like Europe/Berlin"), "{text}");
    let text = error_text(&Scratch::new(), "[agents.list.main]\nuser_timezone = \"Mars/Olympus\"\n");
    assert!(text.contains("agents.list.main.user_timezone"), "{text}");
}

#[test]
fn a_heartbeat_needs_an_interval_of_ten_seconds_or_more_and_a_target() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, "[agents.defaults.heartbeat]\nevery = \"5s\"\ntarget = \"telegram:42\"\n");
    assert!(text.contains("agents.defaults.heartbeat.every") && text.contains("at least 10 seconds"), "{text}");
    let text = error_text(&scratch, "[agents.defaults.heartbeat]\nevery = \"soon\"\ntarget = \"telegram:42\"\n");
    assert!(text.contains("agents.defaults.heartbeat.every") && text.contains("not a duration"), "{text}");
    let text = error_text(&scratch, "[agents.defaults.heartbeat]\nevery = \"30m\"\n");
    assert!(text.contains("agents.defaults.heartbeat.target") && text.contains("telegram:42"), "{text}");
    let hours = "[agents.defaults.heartbeat]\nevery = \"30m\"\ntarget = \"slack:D1\"\n\
                 active_hours = { start = \"8\", end = \"22:00\" }\n";
    let text = error_text(&scratch, hours);
    assert!(text.contains("agents.defaults.heartbeat.active_hours.start"), "{text}");
}

#[test]
fn a_listed_agent_inherits_the_heartbeat() {
    let config = Scratch::new()
        .load_text(
            "[agents.defaults.heartbeat]\nevery = \"30m\"\ntarget = \"telegram:42\"\n\n[agents.list.main]\n\n\
             [agents.list.quiet]\nheartbeat = { every = \"1h\", target = \"slack:D9\" }\n",
            &[],
        )
        .unwrap()
        .config;
    assert_eq!(config.agents.settings_of("main").heartbeat.every.as_deref(), Some("30m"));
    assert_eq!(config.agents.settings_of("quiet").heartbeat.target.as_deref(), Some("slack:D9"));
}

#[test]
fn job_limits_have_ranges() {
    let text = error_text(&Scratch::new(), "[cron]\nmax_jobs_per_chat = 0\n");
    assert!(text.contains("cron.max_jobs_per_chat"), "{text}");
}
