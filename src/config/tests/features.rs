//! Settings that need a cargo feature: refused or warned about, naming the feature, when the
//! build lacks it; accepted when it has it. Each test asserts whichever this build is.

use super::{Scratch, error_text};
use crate::config::features::{FEATURES, built};

fn warnings_of(text: &str) -> Vec<String> {
    let loaded = Scratch::new().load_text(text, &[]).unwrap();
    loaded.warnings.iter().map(|warning| format!("{}: {}", warning.key, warning.reason)).collect()
}

#[test]
fn every_feature_in_the_manifest_is_listed_once() {
    let manifest = include_str!("../../../Cargo.toml");
    let features = manifest.split("\n[features]\n").nth(1).and_then(|rest| rest.split("\n[").next()).unwrap_or("");
    for feature in FEATURES {
        assert!(features.contains(&format!("\n{} = ", feature.name)), "{} not in [features]", feature.name);
    }
    let names: std::collections::BTreeSet<_> = FEATURES.iter().map(|feature| feature.name).collect();
    assert_eq!(names.len(), FEATURES.len());
    assert!(!built("no-such-feature"));
}

#[test]
fn a_postgres_backend_needs_the_postgres_feature() {
    let text = "[state]\nbackend = \"postgres\"\npostgres_url = \"postgres://u:pw@db/ferry\"\n";
    let loaded = Scratch::new().load_text(text, &[]);
    if built("postgres") {
        assert!(loaded.is_ok(), "{:?}", loaded.err());
    } else {
        let shown = error_text(&Scratch::new(), text);
        assert!(shown.contains("state.backend: \"postgres\" needs a ferry built with --features postgres"), "{shown}");
    }
}

#[test]
fn an_mcp_server_needs_the_mcp_feature() {
    let text = "[mcp.servers.files]\ncommand = \"npx\"\n";
    if built("mcp") {
        Scratch::new().load_text(text, &[]).unwrap();
    } else {
        let shown = error_text(&Scratch::new(), text);
        assert!(shown.contains("mcp.servers.files: needs a ferry built with --features mcp"), "{shown}");
    }
}

#[test]
fn web_search_needs_the_web_feature_and_a_coding_profile_warns_without_it() {
    let search = "[tools.web.search]\nprovider = \"searxng\"\nurl = \"http://127.0.0.1:8888\"\n";
    let coding = "[tools]\nprofile = \"coding\"\n";
    if built("web") {
        Scratch::new().load_text(search, &[]).unwrap();
        assert!(!warnings_of(coding).iter().any(|warning| warning.contains("--features web")));
    } else {
        let shown = error_text(&Scratch::new(), search);
        assert!(shown.contains("tools.web.search: needs a ferry built with --features web"), "{shown}");
        let warnings = warnings_of(coding);
        assert!(
            warnings.iter().any(|warning| warning.contains("web_fetch and web_search are not offered")),
            "{warnings:?}"
        );
    }
    assert!(!warnings_of("").iter().any(|warning| warning.contains("--features")), "the chat profile needs nothing");
}

#[test]
fn sandboxed_commands_warn_without_the_sandbox_feature_unless_the_sandbox_is_off() {
    let coding = "[tools]\nprofile = \"coding\"\n";
    let off = "[tools]\nprofile = \"coding\"\n[tools.sandbox]\nmode = \"off\"\n";
    let says = |text: &str| warnings_of(text).iter().any(|warning| warning.contains("--features sandbox"));
    assert_eq!(says(coding), !built("sandbox"));
    assert!(!says(off));
}

#[test]
fn a_vision_model_warns_without_the_media_feature() {
    let text = "[models.providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nvision = true\n\
                [agents.defaults]\nmodel = \"local/m\"\n";
    let warnings = warnings_of(text);
    let says = warnings.iter().any(|warning| warning.starts_with("models.providers.local.vision: images reach"));
    assert_eq!(says, !built("media"), "{warnings:?}");
}
