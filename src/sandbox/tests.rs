use super::*;

#[test]
fn slugs_are_safe_names_and_keys_that_read_alike_still_differ() {
    let one = slug("agent:main:telegram:group:-100");
    assert!(one.starts_with("agent_main_telegram_group_-100-"), "{one}");
    assert_ne!(slug("agent:main:a:b"), slug("agent:main:a_b"));
    assert!(!slug("../../etc").contains('/'));
    assert!(!slug(".hidden").starts_with('.'));
}

#[test]
fn the_host_environment_has_no_credentials() {
    // SAFETY: this test's own variables; no other test reads them.
    unsafe {
        std::env::set_var("FERRY_TEST_SANDBOX_API_KEY", "sk-1");
        std::env::set_var("FERRY_TEST_PLAIN_SETTING", "x");
        std::env::set_var("MY_BOT_TOKEN_FOR_TEST", "t");
        std::env::set_var("SANDBOX_TEST_EDITOR", "vi");
    }
    let names: Vec<String> = host_environment().map(|(name, _)| name.to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|name| name == "SANDBOX_TEST_EDITOR"));
    for secret in ["FERRY_TEST_SANDBOX_API_KEY", "FERRY_TEST_PLAIN_SETTING", "MY_BOT_TOKEN_FOR_TEST"] {
        assert!(!names.iter().any(|name| name == secret), "{secret}");
    }
}

fn sandbox(mode: SandboxMode, scope: SandboxScope, state: &Path) -> Sandbox {
    let config = SandboxConfig { mode, scope, ..SandboxConfig::default() };
    let paths = SandboxPaths {
        state_dir: state.to_path_buf(),
        agent_workspace: state.join("workspace"),
        config_file: None,
        launcher: PathBuf::from("/nonexistent"),
    };
    Sandbox::new(config, paths)
}

#[test]
fn the_mode_decides_who_is_confined_and_the_scope_where_they_work() {
    let state = tempfile::tempdir().unwrap();
    let non_main = sandbox(SandboxMode::NonMain, SandboxScope::Session, state.path());
    assert!(!non_main.confines("agent:main:main"));
    assert!(non_main.confines("agent:main:discord:channel:1"));
    assert!(sandbox(SandboxMode::All, SandboxScope::Session, state.path()).confines("agent:main:main"));
    assert!(!sandbox(SandboxMode::Off, SandboxScope::Session, state.path()).confines("agent:main:slack:channel:c1"));

    // Unprobed: the host session may run commands, a confined one may not.
    assert!(non_main.can_run_commands("agent:main:main"));
    assert!(!non_main.can_run_commands("agent:main:discord:channel:1"));

    let group = non_main.place("agent:main:discord:channel:1").unwrap();
    let other = non_main.place("agent:main:discord:channel:2").unwrap();
    assert!(group.sandboxed && group.workspace.is_dir() && group.tmp.is_dir());
    assert_ne!(group.workspace, other.workspace);
    assert!(group.workspace.starts_with(state.path().join("sandboxes")));
    let shared = sandbox(SandboxMode::All, SandboxScope::Agent, state.path());
    assert_eq!(shared.place("agent:main:discord:channel:1").unwrap().workspace, state.path().join("workspace"));
}
