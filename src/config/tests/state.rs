//! `[state]`: the backend choice, the PostgreSQL URL and where it may come from, and that the
//! URL (which may carry a password) is never shown.

use super::{Scratch, error_text, invalid_key};
use crate::config::{Secret, StateBackendKind, render_redacted};

const POSTGRES: &str = "[state]\nbackend = \"postgres\"\n";

#[test]
fn sqlite_is_the_default_and_needs_no_url() {
    let config = Scratch::new().load_text("", &[]).unwrap().config;
    assert_eq!(config.state.backend, StateBackendKind::Sqlite);
    assert_eq!(config.state.postgres_url, None);
    assert_eq!(config.state.pool_size, 8);
}

#[test]
fn postgres_without_a_url_names_the_key_and_the_variable() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, POSTGRES);
    assert!(text.contains("state.postgres_url: required when state.backend = \"postgres\""), "{text}");
    assert!(text.contains("FERRY_DATABASE_URL"), "{text}");
}

#[test]
fn the_url_comes_from_the_file_else_from_ferry_database_url() {
    let scratch = Scratch::new();
    let from_env = scratch.load_text(POSTGRES, &[("FERRY_DATABASE_URL", "postgres://u:pw@db:5432/ferry")]).unwrap();
    assert_eq!(from_env.config.state.postgres_url.as_ref().map(Secret::expose), Some("postgres://u:pw@db:5432/ferry"));
    let in_file = format!("{POSTGRES}postgres_url = \"postgres://file@db/ferry\"\n");
    let from_file = scratch.load_text(&in_file, &[("FERRY_DATABASE_URL", "postgres://env@db/ferry")]).unwrap();
    assert_eq!(from_file.config.state.postgres_url.as_ref().map(Secret::expose), Some("postgres://file@db/ferry"));
}

#[test]
fn a_malformed_url_is_refused_without_repeating_it() {
    let scratch = Scratch::new();
    for url in [
        "mysql://u:hunter2@db/ferry",
        "postgres://u:hunter2@db:notaport/ferry",
        "postgres://u:hunter2@db/f?sslmode=bogus",
    ] {
        let text = format!("{POSTGRES}postgres_url = \"{url}\"\n");
        let error = scratch.load_text(&text, &[]).unwrap_err();
        let shown = error.to_string();
        assert_eq!(invalid_key(error), "state.postgres_url", "{url}");
        assert!(shown.contains("postgres://user:password@host:port/database"), "{shown}");
        assert!(!shown.contains("hunter2"), "the password leaked: {shown}");
    }
}

#[test]
fn an_unknown_backend_lists_the_valid_ones_and_the_pool_has_a_range() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, "[state]\nbackend = \"mysql\"\n");
    assert!(text.contains("state.backend") && text.contains("sqlite") && text.contains("postgres"), "{text}");
    let text = error_text(&scratch, "[state]\npool_size = 0\n");
    assert!(text.contains("state.pool_size: must be between 1 and 64"), "{text}");
}

#[test]
fn config_show_hides_the_url() {
    let loaded =
        Scratch::new().load_text(POSTGRES, &[("FERRY_DATABASE_URL", "postgres://u:hunter2@db/ferry")]).unwrap();
    let rendered = render_redacted(&loaded.config).unwrap();
    assert!(rendered.contains("postgres_url = \"***\""), "{rendered}");
    assert!(!rendered.contains("hunter2") && !format!("{:?}", loaded.config).contains("hunter2"));
}

#[test]
fn leases_must_be_renewed_well_before_they_lapse() {
    let scratch = Scratch::new();
    let defaults = scratch.load_text("", &[]).unwrap().config.state;
    assert_eq!((defaults.lease_seconds, defaults.renew_seconds), (30, 10));
    let text = error_text(&scratch, "[state]\nlease_seconds = 10\nrenew_seconds = 4\n");
    assert!(text.contains("state.renew_seconds: must be at most a third of state.lease_seconds (10)"), "{text}");
    assert!(scratch.load_text("[state]\nlease_seconds = 9\nrenew_seconds = 3\n", &[]).is_ok());
}

#[test]
fn config_show_of_a_postgres_config_loads_again() {
    let scratch = Scratch::new();
    let loaded = scratch.load_text(&format!("{POSTGRES}postgres_url = \"postgres://u:pw@db/ferry\"\n"), &[]).unwrap();
    let rendered = render_redacted(&loaded.config).unwrap();
    let reloaded = scratch.load_text(&rendered, &[]).expect("the rendering loads");
    assert_eq!(render_redacted(&reloaded.config).unwrap(), rendered);
}
