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
fn mirroring_is_refused_until_it_exists_and_a_mirror_scope_must_be_a_scope() {
    let scratch = Scratch::new();
    let text = error_text(&scratch, "[memory]\nmirror_files = true\nmirror_scope = \"private:telegram:42\"\n");
    assert!(text.contains("memory.mirror_files") && text.contains("not available in this version"), "{text}");
    let text = error_text(&scratch, "[memory]\nmirror_scope = \"alice\"\n");
    assert!(text.contains("memory.mirror_scope") && text.contains("not a memory scope"), "{text}");
}
