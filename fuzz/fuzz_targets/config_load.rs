//! A config file's text, loaded as `ferry.toml` (`src/config/load.rs`: TOML syntax check,
//! layering, deserializing, validation, the error explanations of `explain.rs`).
//!
//! Asserts: never panics; a config that loads renders as TOML (`ferry config show`), and the
//! rendered text loads again to the same rendering.
#![no_main]

use std::path::Path;

use ferry::config::{Environment, load_text, render_redacted};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &[u8]| {
    let Ok(text) = std::str::from_utf8(text) else { return };
    let env = Environment::new(Vec::<(String, String)>::new(), "/fuzz");
    let path = Path::new("/fuzz/ferry.toml");
    let Ok(loaded) = load_text(text, path, &env) else { return };
    let rendered = render_redacted(&loaded.config).expect("a loaded config renders as TOML");
    let reloaded = load_text(&rendered, path, &env)
        .unwrap_or_else(|error| panic!("the rendering of a loaded config does not load: {error}\n{rendered}"));
    let again = render_redacted(&reloaded.config).expect("a loaded config renders as TOML");
    assert_eq!(rendered, again, "loading the rendering changed the config");
});
