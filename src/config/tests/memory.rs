//! `[memory]` and `[memory.embeddings]`: an error names the key and what is valid.

use super::{Scratch, error_text};

#[test]
fn memory_is_on_with_keyword_search_by_default() {
    let config = Scratch::new().load_text("", &[]).unwrap().config;
    assert!(config.memory.enabled && !config.memory.recall && config.memory.embeddings.is_none());
    assert_eq!((config.memory.max_document_bytes, config.memory.max_scope_bytes), (50_000, 5_000_000));
    assert_eq!(config.memory.prompt_bytes, 4_096);
}

#[test]
fn an_embeddings_endpoint_needs_a_url_and_a_model() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, "[memory.embeddings]\nbase_url = \"localhost:11434\"\nmodel = \"m\"\n");
    assert!(text.contains("memory.embeddings.base_url") && text.contains("http(s) URL"), "{text}");
    let text = error_text(&scratch, "[memory.embeddings]\nbase_url = \"http://localhost:11434/v1\"\n");
    assert!(text.contains("memory.embeddings.model") && text.contains("nomic-embed-text"), "{text}");
    let text = error_text(&scratch, "[memory.embeddings]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\nkey = \"k\"\n");
    assert!(text.contains("key"), "an unknown key is named: {text}");
    let config = scratch
        .load_text("[memory.embeddings]\nbase_url = \"http://localhost:11434/v1\"\nmodel = \"nomic-embed-text\"\n", &[])
        .unwrap()
        .config;
    assert_eq!(config.memory.embeddings.unwrap().model, "nomic-embed-text");
}

#[test]
fn limits_have_ranges_and_a_document_fits_its_scope() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, "[memory]\nmax_document_bytes = 10\n");
    assert!(text.contains("memory.max_document_bytes"), "{text}");
    let text = error_text(&scratch, "[memory]\nmax_document_bytes = 60000\nmax_scope_bytes = 50000\n");
    assert!(text.contains("memory.max_document_bytes") && text.contains("cannot hold more than its scope"), "{text}");
}

#[test]
fn mirroring_needs_a_scope_and_a_mirror_scope_must_be_a_scope() {
    let scratch = Scratch::new();
    let config = scratch
        .load_text("[memory]\nmirror_files = true\nmirror_scope = \"private:telegram:42\"\n", &[])
        .unwrap()
        .config;
    assert!(config.memory.mirror_files);
    assert_eq!(config.memory.mirror_scope.as_deref(), Some("private:telegram:42"));
    let text = error_text(&scratch, "[memory]\nmirror_files = true\n");
    assert!(text.contains("memory.mirror_scope") && text.contains("needs the scope to mirror"), "{text}");
    let text = error_text(&scratch, "[memory]\nmirror_files = true\nmirror_scope = \" \"\n");
    assert!(text.contains("memory.mirror_scope"), "{text}");
    let text = error_text(&scratch, "[memory]\nmirror_scope = \"alice\"\n");
    assert!(text.contains("memory.mirror_scope") && text.contains("not a memory scope"), "{text}");
}

#[test]
fn mirroring_into_a_workspace_every_session_shares_is_warned_about() {
    let scratch = Scratch::new();
    let mirror = "[memory]\nmirror_files = true\nmirror_scope = \"private:telegram:42\"\n";
    let own = scratch.load_text(mirror, &[]).unwrap();
    assert!(own.warnings.iter().all(|warning| warning.key != "memory.mirror_files"), "{:?}", own.warnings);
    let shared = scratch.load_text(&format!("{mirror}[tools.sandbox]\nscope = \"agent\"\n"), &[]).unwrap();
    let warning = shared.warnings.iter().find(|warning| warning.key == "memory.mirror_files");
    assert!(warning.is_some_and(|warning| warning.reason.contains("every chat can read")), "{:?}", shared.warnings);
}
